"""Pipeline parallel (libai.parallel.pipeline): the ``parallel`` keys, the split into stages, the
pruned model's names, the merge of microbatch outputs; and through ``tools/train.py`` (on forked
ranks), an interleaved schedule against one process, ``tools/test.py`` and ``sharded2file`` on a
pipeline checkpoint; under a real ``torchrun``, one-line errors on every rank and a failing
rank's traceback. (GPipe and 1F1B against one process, for GPT-2, BERT and Llama: the parity
matrix, tests/parallel/test_parity.py; resume: tests/resume.)"""

from pathlib import Path

import pytest
import torch

from libai.model.zoo.bert import BertForPreTraining
from libai.model.zoo.gpt import GPTForCausalLM
from libai.model.zoo.llama import LlamaForCausalLM
from libai.model.zoo.mlp import DigitsMLP
from libai.parallel import parse_parallel
from libai.parallel.pipeline import (
    Absent,
    balanced_split,
    bubble,
    merge_outputs,
    model_parts,
    prune,
    stage_layout,
)
from libai.utils.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_pipeline_keys_fill_in_and_lay_ranks_out_pipeline_outermost():
    pc = parse_parallel(dict(pipeline=2), 2)
    assert (pc.pipeline, pc.data, pc.pipeline_schedule, pc.virtual_stages, pc.strategy) == (
        2, 1, "1f1b", 1, "pp")
    pc = parse_parallel(dict(pipeline=2, pipeline_schedule="interleaved_1f1b"), 4)
    assert (pc.data, pc.virtual_stages, pc.num_stages, pc.strategy) == (2, 2, 4, "ddp+pp")
    # ranks (pipeline, data): 0, 1 the first stage of shares 0, 1; 2, 3 the last stage
    shares = [pc.data_parallel(r) for r in range(4)]
    assert [(d.rank, d.replica, d.replicas) for d in shares] == [(0, 0, 2), (1, 0, 2),
                                                                (0, 1, 2), (1, 1, 2)]
    assert [pc.pipeline_rank(r) for r in range(4)] == [0, 0, 1, 1]


@pytest.mark.parametrize("value, message", [
    (dict(pipeline=2, pipeline_schedule="1fb1"), "pipeline_schedule='1fb1' is unknown. Did you "
                                                 "mean '1f1b'?"),
    (dict(pipeline=2, virtual_stages=2), "virtual_stages=2 needs an interleaved schedule"),
    (dict(pipeline=2, pipeline_schedule="looped_bfs", virtual_stages=1), "set "
                                                                         "parallel.virtual_stages"),
    (dict(microbatches=4), "parallel.microbatches is a pipeline option, and parallel.pipeline is 1"),
    (dict(pipeline=2, microbatches=0), "parallel.microbatches=0: expected a whole number >= 1"),
    (dict(pipeline=2, pipeline_stage_ids="0011"), "expected a list with the stage of each block"),
    (dict(pipeline=4, data=2), "pipeline=4 x data=2 x fsdp=1 x tensor=1 = 8, but this run has 4"),
])
def test_bad_pipeline_keys_are_one_clear_line(value, message):
    with pytest.raises(ConfigError) as e:
        parse_parallel(value, 4)
    assert message in str(e.value)


def test_the_balanced_split_makes_the_busiest_stage_as_light_as_can_be():
    assert balanced_split([1] * 4, 2) == [2, 2]
    assert balanced_split([1] * 12, 4) == [3, 3, 3, 3]
    assert balanced_split([1] * 7, 4) == [2, 2, 2, 1]
    # the last stage also runs the head: GPT-2 tiny's tied 8192 x 128 head is 5.3 blocks
    assert balanced_split([198272] * 4, 2, last=1048832) == [3, 1]
    assert balanced_split([1] * 16, 4, last=2) == [5, 5, 4, 2]  # loads 5, 5, 4, 4
    assert balanced_split([1, 1, 1, 4], 2) == [3, 1]  # by cost, not by count: loads 3, 4
    assert bubble(2, 4) == pytest.approx(1 / 5)


@pytest.mark.parametrize("value, blocks, message", [
    (dict(pipeline=2), 1, "2 stages, but the model has 1 blocks"),
    (dict(pipeline=2, pipeline_stage_ids=[0, 0, 0, 0]), 4, "leaves stage 1 empty"),
    (dict(pipeline=2, pipeline_stage_ids=[0, 1, 0, 1]), 4, "expected stages 0 ... 1 in order"),
    (dict(pipeline=2, pipeline_stage_ids=[0, 1]), 4, "has 2 entries, but the model has 4 blocks"),
    (dict(pipeline=2, pipeline_stage_ids=[0, 1, 1, 2]), 4, "expected stages 0 ... 1 in order"),
])
def test_a_split_that_cannot_be_is_one_clear_line(value, blocks, message):
    with pytest.raises(ConfigError) as e:
        stage_layout([1.0] * blocks, parse_parallel(value, 2))
    assert message in str(e.value)
    assert stage_layout([1.0] * 4, parse_parallel(dict(pipeline=2, pipeline_stage_ids=[0, 1, 1, 1]),
                                                  2)) == [[0], [1, 2, 3]]


def tiny_gpt():
    torch.manual_seed(0)
    return GPTForCausalLM(vocab_size=64, hidden_size=32, num_layers=4, num_heads=4,
                          max_position_embeddings=16)


def test_each_stage_keeps_its_part_under_the_unsplit_names():
    whole = set(tiny_gpt().state_dict())
    kept = []
    for stage in range(2):
        model = tiny_gpt()
        blocks, parts = model_parts(model, None)
        keep = blocks[2 * stage:2 * stage + 2] + list(parts["first" if stage == 0 else "last"])
        prune(model, keep, [*blocks, *parts["first"], *parts["last"]])
        kept.append(set(model.state_dict()))
        assert isinstance(model.transformer.blocks[2 - 2 * stage], Absent)
    tied = "transformer.embeddings.word_embeddings.weight"
    assert kept[0] & kept[1] == {tied}  # the word embeddings: on both ends
    assert kept[0] | kept[1] == whole
    assert "transformer.embeddings.position_embeddings.weight" not in kept[1]


@pytest.mark.parametrize("build", [
    lambda: BertForPreTraining(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                               ffn_hidden_size=64, max_position_embeddings=16),
    lambda: LlamaForCausalLM(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                             num_kv_heads=2, ffn_hidden_size=64, max_position_embeddings=16,
                             tie_word_embeddings=False),
])
def test_the_zoo_places_every_parameter(build):
    model = build()
    blocks, parts = model_parts(model, None)
    assert len(blocks) == 2 and parts["first"] and parts["last"]


def test_a_model_without_a_split_is_told_what_to_declare():
    with pytest.raises(ConfigError) as e:
        model_parts(DigitsMLP(), None)
    assert "does not say how to cut it into stages" in str(e.value)
    assert "pipeline_split" in str(e.value)


def test_microbatch_outputs_merge_into_the_batch_ones():
    a = {"nll_sum": torch.tensor([1.0, 2.0]), "loss": torch.tensor(0.5),
         "num_items": {"loss": torch.tensor(2)}, "nsp_loss": torch.tensor(1.0)}
    b = {"nll_sum": torch.tensor([3.0]), "loss": torch.tensor(2.0),
         "num_items": {"loss": torch.tensor(6)}, "nsp_loss": torch.tensor(4.0)}
    out = merge_outputs([a, b])
    assert out["nll_sum"].tolist() == [1.0, 2.0, 3.0]
    assert out["num_items"]["loss"].item() == 8
    assert out["loss"].item() == pytest.approx((0.5 * 2 + 2.0 * 6) / 8)  # by its items
    assert out["nsp_loss"].item() == pytest.approx((1.0 * 2 + 4.0 * 1) / 3)  # by its samples


# ---------------------------------------------------------------- through tools/train.py

SHRINK = ["model.num_layers=4", "model.hidden_size=64", "model.num_heads=4",
          "model.hidden_dropout=0.0", "model.attention_dropout=0.0"]
# 3 steps, validated on 2 batches at the end (the whole set through a pipeline: the pp row of the
# parity matrix, tests/parallel/test_parity.py)
TRAIN = [*SHRINK, "train_dataloader.batch_size=8", "train_cfg.max_iters=3",
         "train_cfg.val_interval=3", "val_cfg.limit_batches=2", "default_hooks.logger.interval=1",
         "default_hooks.checkpoint.interval=3", "default_hooks.checkpoint.save_best=None",
         "+default_hooks.logger.plot=False", "test_dataloader=None", "test_evaluator=None"]
TEST = [*SHRINK, "test_dataloader.batch_size=8", "test_cfg.limit_batches=2",
        "+default_hooks.logger.plot=False"]
GPT2 = str(ROOT / "configs" / "gpt2_tiny.py")


def train_args(work, *options):
    return [GPT2, "--work-dir", str(work), "--cfg-options", *TRAIN, *options]


def test_an_interleaved_pipeline_equals_one_process_and_its_checkpoint_reads_anywhere(
        tmp_path, run_tool, spawn_ranks):
    """The schedule's math on 2 forked ranks, the one-process side and the tools in this process
    (torchrun's own path: the tests below)."""
    from libai.checkpoint import load_checkpoint

    # the whole validation set: looped BFS evaluation (several stages per process) meets a short
    # last batch (429 = 53 x 8 + 5), which the parity matrix's 1F1B pp row does not run
    whole_set = "val_cfg.limit_batches=None"
    pp = spawn_ranks(2, "tools/train.py", *train_args(
        tmp_path / "pp", "parallel.pipeline=2", "parallel.pipeline_schedule=interleaved_1f1b",
        whole_set))
    pp.check()
    assert "Pipeline: interleaved_1f1b, 4 stages over 2 processes" in pp.stdout
    # rank 0's model summary is its part of the model, and says so (issue 34)
    assert "Pipeline: the table counts process 0's part of the model only, stages 0, 2 of 4" \
        in pp.stdout
    assert "samples: 429" in pp.stdout  # every sample once
    one = run_tool("tools/train.py", *train_args(tmp_path / "one", whole_set)).check()

    def val_loss(out):
        return float(out.split("val/loss: ")[1].split()[0])

    assert val_loss(pp.stdout) == pytest.approx(val_loss(one.stdout), rel=1e-5)
    ckpt = tmp_path / "pp" / "iter_3.pth"
    assert "sharded" in load_checkpoint(ckpt)

    # one process converts it to one file, and evaluates it with tools/test.py
    whole = tmp_path / "whole.pth"
    run_tool("tools/convert_checkpoint.py", "sharded2file", ckpt, whole).check()
    a = load_checkpoint(whole)["state_dict"]
    b = load_checkpoint(tmp_path / "one" / "iter_3.pth")["state_dict"]
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    test = run_tool("tools/test.py", GPT2, ckpt, "--work-dir", tmp_path / "test",
                    "--cfg-options", *TEST).check()
    assert "test/perplexity" in test.stdout

    # and the other way: a pipeline evaluates the one-process checkpoint (each stage loads its
    # part of the whole weights)
    piped = spawn_ranks(2, "tools/test.py", GPT2, tmp_path / "one" / "iter_3.pth", "--work-dir",
                        tmp_path / "test_pp", "--cfg-options", *TEST, "parallel.pipeline=2")
    piped.check()

    def perplexity(out):
        return float(out.split("test/perplexity: ")[1].split()[0])

    assert perplexity(piped.stdout) == pytest.approx(perplexity(test.stdout), rel=1e-5)


def test_pipeline_mistakes_stop_every_rank_with_one_line(tmp_path, spawn_ranks, torchrun):
    """Each rank says the mistake in one line, without a traceback through libai: a schedule's
    misspelling under a real torchrun launch (what the user sees), a microbatch count that does
    not divide the batch on forked ranks, each rank's output read on its own."""
    out = torchrun(2, "tools/train.py", *train_args(
        tmp_path / "w", "parallel.pipeline=2", "parallel.pipeline_schedule=gpipee"))
    assert out.returncode != 0
    assert "Did you mean 'gpipe'?" in out.stderr, out.stderr[-3000:]
    assert "libai/" not in out.stderr  # no traceback through libai: the line says it all
    ranks = spawn_ranks(2, "tools/train.py", *train_args(
        tmp_path / "m", "parallel.pipeline=2", "parallel.microbatches=3"))
    for rank in ranks.ranks:
        assert rank.returncode != 0
        assert "parallel.microbatches=3 does not divide the batch of 8 samples" in rank.stderr, \
            rank.stderr[-3000:]
        assert "libai/" not in rank.stderr


FAILING_RANK = '''
import torch
import torch.distributed as dist

from libai.utils.cli import run_cli
from libai.utils.dist import destroy_dist, init_dist


def main(argv):
    init_dist("gloo")
    if dist.get_rank() == 1:
        raise ValueError("a bug on rank 1")
    dist.recv(torch.zeros(1), src=1)  # waits for rank 1, as a pipeline stage waits for the next


run_cli(main, teardown=destroy_dist)
'''


def test_a_bug_on_one_rank_ends_the_run_with_its_traceback(tmp_path, torchrun):
    """A rank that fails must not wait for its peers at the teardown (one of them waits for it:
    a pipeline's next stage): it leaves, with its traceback, and torchrun stops the others.
    A real torchrun launch: stopping the others is torchrun's part of the claim."""
    script = tmp_path / "failing.py"
    script.write_text(FAILING_RANK)
    out = torchrun(2, script, timeout=120, env=dict(PYTHONPATH=str(ROOT)))
    assert out.returncode != 0
    assert "ValueError: a bug on rank 1" in out.stderr
