"""libai.parallel: the ``parallel`` key, activation checkpointing, FSDP2 and tensor parallel
against one process."""

import parallel_worker
import pytest
import torch

from libai.model.zoo.gpt import GPTForCausalLM
from libai.model.zoo.mlp import DigitsMLP
from libai.parallel import ParallelConfig, apply_activation_checkpointing, parse_parallel
from libai.utils.errors import ConfigError


def test_sizes_fill_in_data_and_name_the_strategy():
    assert parse_parallel(None, 4) == ParallelConfig(world_size=4, data=4)
    pc = parse_parallel(dict(fsdp=2), 4)
    assert (pc.data, pc.fsdp, pc.tensor, pc.strategy) == (2, 2, 1, "hsdp")
    assert parse_parallel(dict(fsdp=2, tensor=2), 4).strategy == "fsdp+tp"
    assert parse_parallel(dict(tensor=2), 2).data_parallel_size == 1
    assert parse_parallel(None, 1).strategy == "single"


@pytest.mark.parametrize("value, message", [
    (dict(fsdp=3), "fsdp=3 x tensor=1 = 3 does not divide the 4 process(es)"),
    (dict(data=1, fsdp=2), "data=1 x fsdp=2 x tensor=1 = 2, but this run has 4 process(es)"),
    (dict(pipeline=3), "pipeline=3 x fsdp=1 x tensor=1 = 3 does not divide the 4 process(es)"),
    (dict(fsdb=2), "unknown key 'fsdb'. Did you mean 'fsdp'?"),
    (dict(tensor=0), "parallel.tensor=0: expected a whole number >= 1"),
    (dict(fsdp=2, cpu_offload="yes"), "parallel.cpu_offload='yes': expected True or False"),
    ("fsdp", "parallel must be a dict"),
])
def test_bad_sizes_are_one_clear_line(value, message):
    with pytest.raises(ConfigError) as e:
        parse_parallel(value, 4)
    assert message in str(e.value)


def tiny_gpt(dropout=0.1):
    torch.manual_seed(0)
    return GPTForCausalLM(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                          max_position_embeddings=16, hidden_dropout=dropout,
                          attention_dropout=dropout)


def test_activation_checkpointing_changes_memory_not_results():
    ids = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(0))
    batch = dict(input_ids=ids[:, :-1], labels=ids[:, 1:])
    grads = []
    for policy in (None, "blocks", dict(modules=["MLP"])):
        model = tiny_gpt()  # with dropout: the recomputation must draw the same masks
        assert apply_activation_checkpointing(model, policy) == (
            [] if policy is None else ["TransformerBlock"] if policy == "blocks" else ["MLP"])
        keys = list(model.state_dict())
        torch.manual_seed(1)
        model(batch)["loss"].backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        assert list(model.state_dict()) == keys  # no wrapper module, the same checkpoint keys
    for other in grads[1:]:
        for a, b in zip(grads[0], other):
            assert torch.equal(a, b)


@pytest.mark.parametrize("value, message", [
    (dict(modules=["TransformerBlok"]), "no module of class 'TransformerBlok'. Did you mean "
                                        "'TransformerBlock'"),
    ("every", "expected None, 'blocks' or dict(modules=["),
])
def test_activation_checkpointing_bad_input(value, message):
    with pytest.raises(ConfigError) as e:
        apply_activation_checkpointing(tiny_gpt(), value)
    assert message in str(e.value)


def test_blocks_policy_needs_a_declaration():
    with pytest.raises(ConfigError, match="DigitsMLP declares no parallel_blocks"):
        apply_activation_checkpointing(DigitsMLP(), "blocks")


def test_fsdp_and_tensor_parallel_equal_one_process(spawn_ranks):
    # the strategies' math on 2 forked ranks (parallel_worker.main); torchrun's own path:
    # tests/parallel/test_pipeline.py and the parity matrix
    ranks = spawn_ranks(2, parallel_worker.main, timeout=300).check()
    diff = ranks.ranks[0].value
    # 3 AdamW steps on 2 processes vs one process on the same global batch; DDP's own difference
    # (sums of the same numbers in another order) is the yardstick
    assert diff["fsdp_vs_ddp"] == 0.0, diff  # FSDP2 reduces the same sums as DDP
    assert diff["fsdp"] < 1e-6 and diff["fsdp+checkpointing"] < 1e-6, diff
    assert diff["tp"] < 1e-5, diff  # vocabulary-split embedding and logits, parallel loss
    # rank0_init: rank 1 built on the meta device and got rank 0's weights: the same training
    assert diff["rank0_init_vs_each_builds"] == 0.0, diff
    assert diff.pop("plain tensor").startswith(
        "parallel.rank0_init: WithPlainTensor keeps tensors that are neither parameters nor "
        "buffers (lin.scale), so rank 0 cannot send them. Register each one as a buffer")
    assert diff.pop("tp_vocab_split") == "(Shard(dim=0),)torch.Size([48, 32])"


def test_rank0_init_shares_tied_weights_again_after_to_empty():
    """A meta model given memory (what ranks > 0 do under rank0_init) keeps its weight tying."""
    from libai.parallel.apply import _retie, _tied_names

    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
        model[1].weight = model[0].weight
    tied = _tied_names(model)
    assert tied == [["0.weight", "1.weight"]]
    model.to_empty(device="cpu")
    _retie(model, tied)
    assert model[1].weight is model[0].weight


@pytest.mark.parametrize("sizes, message", [
    (dict(data=1, fsdp=2), "moves parameters and optimizer state from the GPU to the host, and "
                           "this run is on the CPU already"),
    (dict(data=2), "is an FSDP option: set parallel.fsdp too"),
])
def test_cpu_offload_where_it_cannot_apply_is_one_line(sizes, message):
    from libai.parallel import parallelize

    pc = ParallelConfig(world_size=2, cpu_offload=True, **sizes)
    with pytest.raises(ConfigError, match=message):  # before any mesh or collective is needed
        parallelize(torch.nn.Linear(2, 2), pc, None, torch.device("cpu"))


@pytest.mark.parametrize("world_size", [1, 2])
def test_cpu_offload_without_fsdp_is_the_same_line_in_one_process_and_under_torchrun(
        tmp_path, world_size):
    """One process never parallelizes: the check is in parse_parallel, which every run calls."""
    from libai.parallel.config import CPU_OFFLOAD_WITHOUT_FSDP
    from libai.runner import Runner
    from libai.testing import toy_config

    with pytest.raises(ConfigError) as e:
        parse_parallel(dict(cpu_offload=True), world_size)
    assert str(e.value) == CPU_OFFLOAD_WITHOUT_FSDP
    assert "set parallel.fsdp too" in str(e.value) and "\n" not in str(e.value)
    if world_size == 1:  # the whole run, as `libai train ... parallel.cpu_offload=True` builds it
        with pytest.raises(ConfigError) as e:
            Runner.from_cfg(toy_config(work_dir=str(tmp_path), parallel=dict(cpu_offload=True)))
        assert str(e.value) == CPU_OFFLOAD_WITHOUT_FSDP
        assert not any(tmp_path.iterdir())  # refused before any file
