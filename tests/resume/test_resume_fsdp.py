"""FSDP2 on two processes (gloo, CPU): sharded checkpoints (libai.checkpoint.sharded), interrupted
inside an accumulation window and resumed, bit-identical to an uninterrupted run; then the same
checkpoint resumed by one process (resharded on load). The uninterrupted run saves in the
background (``async_save``) while it trains on: its shards must hold the state as it was. It
also builds the model on rank 0 only (``rank0_init``): rank 1 receives its part, and the same
random numbers follow."""

import subprocess

import pytest
import resume_helpers as rh
import torch
from test_resume_ddp import CONFIG, STOP_HOOK, K, N, torchrun
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from libai.checkpoint import load_checkpoint

FSDP = "\nparallel = dict(fsdp=2)\n"
ASYNC = ("--cfg-options", "+default_hooks.checkpoint.async_save=True")


def shards(path, tmp_path):
    """The model and optimizer state in a sharded checkpoint's folder, as full tensors."""
    out = tmp_path / f"{path.parent.name}-{path.stem}.pt"
    dcp_to_torch_save(str(path.with_suffix(".dcp")), str(out))
    return torch.load(out, weights_only=False)


@pytest.mark.slow
def test_fsdp_resume_inside_an_accumulation_window_is_bit_identical(tmp_path):
    (tmp_path / "resume_ctrl_c.py").write_text(STOP_HOOK)
    plain, stopping = tmp_path / "plain.py", tmp_path / "stopping.py"
    plain.write_text(CONFIG.format(n=N, k=K, acc=2, hooks=[]) + FSDP)
    stopping.write_text(CONFIG.format(n=N, k=K, acc=2, hooks=[
        dict(type="resume_ctrl_c.CtrlCAtHook", at=K)]) + FSDP)

    straight = torchrun(tmp_path, plain, tmp_path / "straight", *ASYNC, "+parallel.rank0_init=True")
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "FSDP2: parameters, gradients and optimizer state sharded over 2" in straight.stdout
    assert "rank0_init: rank 0 built the model and sent each process its part" in straight.stdout
    stopped = torchrun(tmp_path, stopping, tmp_path / "resumed")
    assert stopped.returncode != 0, stopped.stderr[-3000:]
    ckpt = load_checkpoint(tmp_path / "resumed" / f"iter_{K}.pth")
    assert ckpt["state_dict"] == {} and ckpt["sharded"]["grads"]  # K is inside the window
    assert sorted(ckpt["sharded"]["files"]) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    resumed = torchrun(tmp_path, plain, tmp_path / "resumed", "--resume", *ASYNC)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    a = shards(tmp_path / "straight" / f"iter_{N}.pth", tmp_path)
    b = shards(tmp_path / "resumed" / f"iter_{N}.pth", tmp_path)
    rh.assert_same_tensors(a, b, "shards")
    # written in the background while training went on, written in the foreground: the same
    a = shards(tmp_path / "straight" / f"iter_{K}.pth", tmp_path)
    b = shards(tmp_path / "resumed" / f"iter_{K}.pth", tmp_path)
    rh.assert_same_tensors(a, b, "shards at K")
    assert not list((tmp_path / "straight").glob("*.tmp"))
    listing = load_checkpoint(tmp_path / "straight" / f"iter_{K}.pth")["sharded"]["files"]
    assert sorted(listing) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", N)

    # one process resumes the 2-process checkpoint: the shards are resharded on load
    one = subprocess.run(
        [rh.PYTHON, rh.TRAIN_TOOL, str(plain), "--work-dir", str(tmp_path / "resumed"),
         "--resume", str(tmp_path / "resumed" / f"iter_{K}.pth"), "--allow-changes", "world_size",
         "--cfg-options", "parallel.fsdp=1"], cwd=rh.ROOT, env=rh.python_env(pythonpath=str(tmp_path)),
        capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-3000:]
    assert "Sharded checkpoint of 2 process(es) loaded into 1: resharded on load" in one.stdout
