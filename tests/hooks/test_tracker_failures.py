"""Trackers and scalar files cannot end a run: a backend that fails is one warning line, the run
trains to the end. device="cpu": the claim is about error handling, the same on every device."""

import os
import sys
import types

import pytest

from libai.runner import Runner
from libai.testing import toy_config
from libai.visualization.backends import JsonlBackend


def _train(tmp_path, backends, max_iters=6):
    cfg = toy_config(work_dir=str(tmp_path), default_hooks=dict(
        logger=dict(interval=2, progress_bar=False, plot=False, backends=backends),
        checkpoint=None), train_cfg=dict(max_iters=max_iters, val_interval=100), device="cpu")
    runner = Runner.from_cfg(cfg)
    runner.train()
    with open(os.path.join(runner.log_dir, f"{runner.timestamp}.log")) as f:
        return runner, [line for line in f.read().splitlines() if "WARNING" in line]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_full_disk_under_scalars_jsonl_is_one_warning(tmp_path, monkeypatch):
    opened = JsonlBackend.open

    def open_on_a_full_disk(self, log_dir, resume_step=None):
        opened(self, log_dir, resume_step)
        self._file.close()
        self._file = open("/dev/full", "w", encoding="utf-8")  # every write: ENOSPC

    monkeypatch.setattr(JsonlBackend, "open", open_on_a_full_disk)
    runner, warned = _train(tmp_path, [dict(type="JsonlBackend", flush_secs=0)])
    assert runner.iter == 6
    lost = [line for line in warned if "scalars lost" in line]
    assert len(lost) == 1, warned
    assert "JsonlBackend: scalars lost from step 2 on (OSError: [Errno 28] No space" in lost[0]


def test_a_tracker_that_cannot_start_is_one_warning(tmp_path, monkeypatch):
    def init(**kwargs):
        raise ConnectionError("api.wandb.ai unreachable")

    fake = types.SimpleNamespace(init=init, Settings=lambda **kw: kw)  # wandb, as far as used
    monkeypatch.setitem(sys.modules, "wandb", fake)
    runner, warned = _train(tmp_path, [dict(type="JsonlBackend", flush_secs=0),
                                       dict(type="WandbBackend", mode="online")])
    assert runner.iter == 6
    lost = [line for line in warned if "WandbBackend" in line]
    assert len(lost) == 1, warned
    assert "could not start" in lost[0] and "ConnectionError: api.wandb.ai" in lost[0]
    assert os.path.getsize(os.path.join(runner.log_dir, "scalars.jsonl"))  # the others write on
