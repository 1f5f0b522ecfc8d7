"""FSDP2 on two processes (gloo, CPU): sharded checkpoints (libai.checkpoint.sharded), interrupted
inside an accumulation window and resumed, bit-identical to an uninterrupted run; then the same
checkpoint resumed by one process (resharded on load). The uninterrupted run saves in the
background (``async_save``) while it trains on: its shards must hold the state as it was. It
also builds the model on rank 0 only (``rank0_init``): rank 1 receives its part, and the same
random numbers follow.

The two ranks are forked (spawn_ranks) and run the three runs in one process group
(resume_helpers.runs_in_turn); the one-process resume runs tools/train.py in-process (run_tool).
"""

import resume_helpers as rh
import torch
from test_resume_ddp import K, N, configs
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from libai.checkpoint import load_checkpoint

FSDP = "\nparallel = dict(fsdp=2)\n"
ASYNC = ("--cfg-options", "+default_hooks.checkpoint.async_save=True")


def shards(path, tmp_path):
    """The model and optimizer state in a sharded checkpoint's folder, as full tensors."""
    out = tmp_path / f"{path.parent.name}-{path.stem}.pt"
    dcp_to_torch_save(str(path.with_suffix(".dcp")), str(out))
    return torch.load(out, weights_only=False)


def test_fsdp_resume_inside_an_accumulation_window_is_bit_identical(tmp_path, spawn_ranks,
                                                                    run_tool):
    plain, stopping = configs(tmp_path, FSDP)
    straight_dir, work = tmp_path / "straight", tmp_path / "resumed"
    straight, stopped, resumed = rh.runs_in_turn(
        spawn_ranks, 2,
        [plain, "--work-dir", straight_dir, *ASYNC, "+parallel.rank0_init=True"],
        [stopping, "--work-dir", work],
        [plain, "--work-dir", work, "--resume", *ASYNC])
    assert straight.returncode == 0, straight.output[-3000:]
    assert "FSDP2: parameters, gradients and optimizer state sharded over 2" in straight.stdout
    assert "rank0_init: rank 0 built the model and sent each process its part" in straight.stdout
    assert stopped.returncode == 130, stopped.output[-3000:]
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert f"Resumed from {work / f'iter_{K}.pth'}" in resumed.output
    ckpt = load_checkpoint(work / f"iter_{K}.pth")
    assert ckpt["state_dict"] == {} and ckpt["sharded"]["grads"]  # K is inside the window
    assert sorted(ckpt["sharded"]["files"]) == [".metadata", "__0_0.distcp", "__1_0.distcp"]

    a = shards(straight_dir / f"iter_{N}.pth", tmp_path)
    b = shards(work / f"iter_{N}.pth", tmp_path)
    rh.assert_same_tensors(a, b, "shards")
    # written in the background while training went on, written in the foreground: the same
    a = shards(straight_dir / f"iter_{K}.pth", tmp_path)
    b = shards(work / f"iter_{K}.pth", tmp_path)
    rh.assert_same_tensors(a, b, "shards at K")
    assert not list(straight_dir.glob("*.tmp"))
    listing = load_checkpoint(straight_dir / f"iter_{K}.pth")["sharded"]["files"]
    assert sorted(listing) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    rh.assert_same_logs(straight_dir, work, N)

    # one process resumes the 2-process checkpoint: the shards are resharded on load
    one = run_tool("tools/train.py", plain, "--work-dir", work,
                   "--resume", work / f"iter_{K}.pth", "--allow-changes", "world_size",
                   "--cfg-options", "parallel.fsdp=1")
    assert one.returncode == 0, one.output[-3000:]
    assert "Sharded checkpoint of 2 process(es) loaded into 1: resharded on load" in one.stdout
