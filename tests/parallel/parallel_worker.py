"""The ranks of a 2-process run (gloo, CPU): each strategy trains a tiny GPT for a few AdamW
steps next to a one-process reference on the same global batch, and :func:`main` returns the
largest parameter difference per strategy (tests/parallel/test_parallel.py forks the ranks with
spawn_ranks and reads rank 0's; run under torchrun, rank 0 prints it as JSON).
"+graph" cases compile the sharded model block by block (GraphModule's ``blocks``; the
``aot_eager`` backend: the same graphs as inductor's, without the C++ build).
With 4 processes (by hand under torchrun: too slow for the suite on 2 cores) it runs 2-D FSDP x
TP instead."""

import contextlib
import json
import os

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.tensor.parallel import loss_parallel

from libai.model.graph import GraphModule
from libai.model.zoo.gpt import GPTForCausalLM
from libai.optim.clip import clip_grad_norm_
from libai.parallel import ParallelConfig, build_mesh, build_on_rank0, find_blocks, parallelize
from libai.utils.errors import ConfigError

STEPS, BATCH, SEQ = 3, 4, 16


def tiny_gpt() -> GPTForCausalLM:
    torch.manual_seed(0)
    return GPTForCausalLM(vocab_size=96, hidden_size=32, num_layers=2, num_heads=4,
                          max_position_embeddings=SEQ, hidden_dropout=0.0, attention_dropout=0.0)


class WithPlainTensor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.lin.scale = torch.ones(2)  # neither a parameter nor a buffer


def batches():
    g = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        ids = torch.randint(0, 96, (BATCH, SEQ + 1), generator=g)
        yield dict(input_ids=ids[:, :-1], labels=ids[:, 1:])


def train(model, local_batch, tensor_parallel=False, graph=None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = model if graph is None else graph
    for batch in batches():
        # tensor parallel: the tied LM head's logits are split by vocabulary, and the
        # cross-entropy runs on the splits (what the runner does with in_loss_parallel)
        with loss_parallel() if tensor_parallel else contextlib.nullcontext():
            step(local_batch(batch))["loss"].backward()
        clip_grad_norm_(list(model.parameters()), 1.0)
        opt.step()
        opt.zero_grad()
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))


def max_diff(a, b):
    return max((a[k].float() - b[k].float()).abs().max().item() for k in b)


def main() -> dict:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    reference = train(tiny_gpt(), lambda b: b)
    shard = lambda b: {k: v.chunk(world)[rank] for k, v in b.items()}  # noqa: E731
    cases = {
        "ddp": (dict(data=world), None, shard),
        "fsdp": (dict(data=1, fsdp=world), None, shard),
        "fsdp+checkpointing": (dict(data=1, fsdp=world), "blocks", shard),
        "tp": (dict(data=1, tensor=world), None, lambda b: b),
        "ddp+rank0_init": (dict(data=world, rank0_init=True), None, shard),
        "fsdp+rank0_init": (dict(data=1, fsdp=world, rank0_init=True), None, shard),
        "tp+rank0_init": (dict(data=1, tensor=world, rank0_init=True), None, lambda b: b),
        # graph mode on 2 processes (blocks compiled one by one, fsdp and tp): the parity
        # matrix's gpt2/fsdp+graph and gpt2/tp+graph rows, through tools/train.py --graph
    }
    if world == 4:  # 2-D: FSDP over 2 x tensor parallel over 2 (run by hand: 4 processes)
        shard2 = lambda b: {k: v.chunk(2)[rank // 2] for k, v in b.items()}  # noqa: E731
        cases = {"ddp": cases["ddp"], "fsdp+tp": (dict(data=1, fsdp=2, tensor=2), None, shard2),
                 "fsdp+tp+graph": (dict(data=1, fsdp=2, tensor=2), None, shard2)}
    result, states = {}, {}
    for name, (sizes, checkpointing, local) in cases.items():
        pc = ParallelConfig(world_size=world, **sizes)
        # rank0_init: the other ranks build on the meta device and receive rank 0's weights
        model, _ = parallelize(build_on_rank0(tiny_gpt, pc), pc, build_mesh(pc, "cpu"),
                               torch.device("cpu"), activation_checkpointing=checkpointing)
        if pc.tensor > 1:  # the word embedding (and so the tied head) split by vocabulary
            weight = model.transformer.embeddings.word_embeddings.weight
            result["tp_vocab_split"] = str(weight.placements) + str(weight.to_local().shape)
        graph = None
        if name.endswith("+graph"):
            graph = GraphModule(model, compile=dict(backend="aot_eager"), on_failure="raise",
                                blocks=find_blocks(model, None))
        state = train(model, local, tensor_parallel=pc.tensor > 1, graph=graph)
        if graph is not None:
            result[name + " report"] = graph.report().splitlines()[0]
        states[name] = {k.removeprefix("module."): v for k, v in state.items()}
        result[name] = max_diff(states[name], reference)
    if "fsdp" in states:
        result["fsdp_vs_ddp"] = max_diff(states["fsdp"], states["ddp"])
        result["rank0_init_vs_each_builds"] = max(
            max_diff(states[f"{s}+rank0_init"], states[s]) for s in ("ddp", "fsdp", "tp"))
    try:  # a tensor kept outside parameters and buffers cannot be sent: every rank says so
        build_on_rank0(WithPlainTensor, ParallelConfig(world_size=world, data=world, rank0_init=True))
    except ConfigError as e:
        result["plain tensor"] = str(e)
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    result = main()
    if os.environ.get("RANK") == "0":
        print("RESULT " + json.dumps(result))
