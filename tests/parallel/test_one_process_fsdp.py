"""FSDP2 on a one-process mesh (issue 37 item 5): ``parallel=dict(fsdp=1, cpu_offload=True)`` in
one process shards over a mesh of this process with FSDP2's CPUOffloadPolicy (one GPU, a model
larger than its memory), and ``one_process_fsdp=True`` the same without the offload; both train
as the plain run does. tools/train.py in this process (run_tool) on the digits config. Device:
CPU (there the offload policy runs and moves nothing: the parameters are on the host already).
"""

import json

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from libai.checkpoint import load_checkpoint
from libai.parallel import parse_parallel
from libai.utils.errors import ConfigError

DIGITS = "configs/digits_mlp.py"
STEPS = 6
OPTIONS = ("train_cfg.max_iters=6", "train_cfg.val_interval=6", "val_cfg.limit_batches=2",
           "default_hooks.checkpoint.interval=6", "default_hooks.checkpoint.save_best=None",
           "+default_hooks.logger.plot=False", "default_hooks.logger.interval=1",
           "+optim_wrapper.accumulative_counts=2", "test_dataloader=None", "test_evaluator=None")


def _weights(work, tmp_path):
    ckpt = work / f"iter_{STEPS}.pth"
    state = load_checkpoint(ckpt)
    if "sharded" not in state:
        return state["state_dict"]
    out = tmp_path / f"{work.name}.pt"
    dcp_to_torch_save(str(ckpt.with_suffix(".dcp")), str(out))
    return torch.load(out, weights_only=False)["model"]


def _losses(work):
    lines = next(work.glob("*/scalars.jsonl")).read_text().splitlines()
    return [r["train/loss"] for r in map(json.loads, lines) if "train/loss" in r]


@pytest.mark.parametrize("parallel", [
    ("parallel.fsdp=1", "+parallel.cpu_offload=True"),
    ("+parallel.one_process_fsdp=True",),
], ids=["fsdp=1+cpu_offload", "one_process_fsdp"])
def test_one_process_fsdp_trains_as_the_plain_run(tmp_path, run_tool, parallel):
    runs = {}
    for name, extra in (("plain", ()), ("fsdp", parallel)):
        work = tmp_path / name
        run = run_tool("tools/train.py", DIGITS, "--work-dir", work, "--cfg-options", *OPTIONS,
                       *extra).check()
        runs[name] = (run, work)
    out = runs["fsdp"][0].stdout
    assert "Parallel: fsdp over 1 process(es)" in out and "FSDP2 on a one-process mesh" in out
    if "+parallel.cpu_offload=True" in parallel:
        assert "cpu_offload on a CPU run: the offload policy runs, and nothing moves" in out
    plain, fsdp = (_weights(w, tmp_path) for _, w in runs.values())
    assert sorted(plain) == sorted(fsdp)
    worst = max((plain[k].float() - fsdp[k].float()).abs().max().item() for k in plain)
    assert worst <= 2e-5, worst  # the parity rows' fsdp tolerance
    a, b = (_losses(w) for _, w in runs.values())
    assert len(a) == STEPS and a == pytest.approx(b, rel=1e-6)


def test_the_one_process_mesh_is_one_process_only():
    assert parse_parallel(dict(fsdp=1, cpu_offload=True), 1).one_process_fsdp
    assert not parse_parallel(dict(fsdp=1), 1).one_process_fsdp  # fsdp=1 alone: no sharding
    assert parse_parallel(dict(one_process_fsdp=True), 1).strategy == "fsdp"
    with pytest.raises(ConfigError, match="one_process_fsdp=True shards over a mesh of one "
                                          "process, and this run has 2: use parallel.fsdp=2"):
        parse_parallel(dict(one_process_fsdp=True), 2)
