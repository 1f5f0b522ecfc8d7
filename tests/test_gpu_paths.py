"""Checks that only mean something on CUDA (the ``gpu`` marker: skipped where torch sees no GPU;
``benchmarks/gpu_check.py`` runs them first on a GPU machine). Each trains
``configs/digits_mlp.py`` in this process for a few steps on ``cuda``: float16 with its
GradScaler saved and resumed, the CUDA RNG state in the checkpoint, pinned-memory loaders, the
memory figure in the log, NCCL in one process.

Written without a GPU at hand (no device was lent when they were written): the first GPU run
says whether they hold.
"""

from pathlib import Path

import pytest
import torch

from libai.checkpoint import load_checkpoint
from libai.config import Config
from libai.runner import Runner

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


def digits(tmp_path, **options):
    cfg = Config.fromfile(str(ROOT / "configs" / "digits_mlp.py"))
    cfg.device = "cuda"
    cfg.work_dir = str(tmp_path / "work")
    cfg.train_cfg.max_iters = 4
    cfg.train_cfg.val_interval = 100
    cfg.default_hooks.checkpoint.interval = 2
    cfg.default_hooks.logger.interval = 1
    cfg.default_hooks.logger.plot = False
    for key, value in options.items():
        cfg[key] = value
    return cfg


def straight_and_resumed(tmp_path, **options):
    """The iter_4 checkpoints of a straight run to 4 and of a run resumed from its iter_2."""
    straight = Runner.from_cfg(digits(tmp_path / "a", **options))
    straight.train()
    first = Path(straight.work_dir)
    resumed = Runner.from_cfg(digits(tmp_path / "b", **options, resume=str(first / "iter_2.pth")))
    resumed.train()
    return (load_checkpoint(first / "iter_4.pth"),
            load_checkpoint(Path(resumed.work_dir) / "iter_4.pth"))


def test_float16_loss_scale_is_saved_and_resumed(tmp_path):
    wrapper = dict(type="AmpOptimWrapper", dtype="float16", optimizer=dict(type="AdamW", lr=1e-3))
    a, b = straight_and_resumed(tmp_path, optim_wrapper=wrapper)
    scaler = a["optimizer"]["loss_scaler"]
    assert scaler["scale"] > 0
    assert b["optimizer"]["loss_scaler"] == scaler  # scale, growth tracker: as if never stopped


def test_the_cuda_rng_state_is_saved_and_restored(tmp_path):
    """digits_mlp has dropout: the CUDA generator advances every step, and a resumed run must
    end where the straight one does."""
    a, b = straight_and_resumed(tmp_path)
    assert len(a["rng"][0]["cuda"]) == torch.cuda.device_count()
    assert torch.equal(a["rng"][0]["cuda"][0], b["rng"][0]["cuda"][0])


def test_a_pinned_memory_loader_gives_pinned_batches(tmp_path):
    cfg = digits(tmp_path)
    cfg.train_dataloader.pin_memory = True
    runner = Runner.from_cfg(cfg)
    batch = next(iter(runner.train_dataloader))
    tensors = batch.values() if isinstance(batch, dict) else batch
    assert all(t.is_pinned() for t in tensors if isinstance(t, torch.Tensor))


def test_the_log_shows_peak_memory_on_cuda(tmp_path, caplog):
    runner = Runner.from_cfg(digits(tmp_path))
    runner.train()
    log = next(Path(runner.log_dir).glob("*.log")).read_text()
    assert "memory: " in log  # LoggerHook: torch.cuda.max_memory_allocated, MiB


def test_nccl_in_one_process_trains(tmp_path, monkeypatch):
    """One process under torchrun's environment: the default backend on CUDA is NCCL."""
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29533")):
        monkeypatch.setenv(key, value)
    runner = Runner.from_cfg(digits(tmp_path))
    try:
        runner.train()
        assert torch.distributed.get_backend() == "nccl"
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
