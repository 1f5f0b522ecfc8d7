"""AsyncCheckpointSaver: host copy, background write, ordering and error reporting."""

from __future__ import annotations

import errno
import os
import threading
import time

import pytest
import torch

from libai.checkpoint import (
    AsyncCheckpointSaver,
    find_resumable,
    is_complete,
    load_checkpoint,
    read_latest,
    save_checkpoint,
    update_latest,
)
from libai.checkpoint import io as ckpt_io
from libai.utils.errors import CheckpointError


def test_async_save_then_load_equal_and_isolated_from_later_changes(tmp_path):
    weight = torch.arange(12.0).reshape(3, 4)
    state = {"model": {"w": weight, "tied": weight}, "iter": 3, "meta": ["a", (1, 2.5)]}
    path = tmp_path / "iter_3.pth"
    with AsyncCheckpointSaver() as saver:
        saver.save(state, path, on_done=lambda p: update_latest(tmp_path, p))
        weight.add_(100)  # training goes on while the file is written
    back = load_checkpoint(path)
    assert torch.equal(back["model"]["w"], torch.arange(12.0).reshape(3, 4))
    assert back["model"]["w"].data_ptr() == back["model"]["tied"].data_ptr()  # sharing kept
    assert back["iter"] == 3 and back["meta"] == ["a", (1, 2.5)]
    assert is_complete(path) and read_latest(tmp_path) == path


def test_next_save_waits_for_the_previous_one(tmp_path):
    events: list[str] = []
    release = threading.Event()

    def slow_done(path):
        release.wait(5)
        events.append(f"done {path.name}")

    saver = AsyncCheckpointSaver()
    saver.save({"i": 1}, tmp_path / "a.pth", on_done=slow_done)
    assert saver.pending

    def second():
        saver.save({"i": 2}, tmp_path / "b.pth", on_done=lambda p: events.append("done b.pth"))
        events.append("second save returned")

    caller = threading.Thread(target=second)
    caller.start()
    time.sleep(0.1)
    assert events == []  # still blocked behind the first save
    release.set()
    caller.join(5)
    saver.close()
    assert events[0] == "done a.pth" and set(events[1:]) == {"second save returned", "done b.pth"}
    with pytest.raises(CheckpointError, match="closed"):
        saver.save({"i": 3}, tmp_path / "c.pth")


def test_background_failure_surfaces_on_wait_and_keeps_latest(tmp_path, monkeypatch):
    first = tmp_path / "iter_1.pth"
    save_checkpoint({"i": 1}, first)
    update_latest(tmp_path, first)

    def full_disk(obj, f):
        f.write(b"partial bytes")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ckpt_io.torch, "save", full_disk)
    saver = AsyncCheckpointSaver()
    called = []
    saver.save({"i": 2}, tmp_path / "iter_2.pth", on_done=called.append)
    with pytest.raises(CheckpointError) as info:
        saver.wait()
    msg = str(info.value)
    assert "Background checkpoint save failed" in msg and "iter_2.pth" in msg
    assert "No space left on device" in msg
    assert called == []  # the pointer update never ran
    assert read_latest(tmp_path) == first and find_resumable(tmp_path) == first
    assert not (tmp_path / "iter_2.pth").exists()
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]
    saver.wait()  # reported once; the saver is usable again
    monkeypatch.undo()
    saver.save({"i": 3}, tmp_path / "iter_3.pth")
    saver.close()
    assert load_checkpoint(tmp_path / "iter_3.pth") == {"i": 3}


def test_callback_failure_and_bad_state(tmp_path):
    saver = AsyncCheckpointSaver()

    def broken(path):
        raise ValueError("prune failed")

    saver.save({"i": 1}, tmp_path / "a.pth", on_done=broken)
    with pytest.raises(CheckpointError, match="ValueError: prune failed"):
        saver.wait()
    assert is_complete(tmp_path / "a.pth")
    with pytest.raises(CheckpointError, match="hooks.fn: function"):
        saver.save({"hooks": {"fn": print}}, tmp_path / "b.pth")  # checked in the caller
    assert not saver.pending
    saver.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_async_save_copies_cuda_tensors_to_host(tmp_path):
    weight = torch.randn(256, 256, device="cuda")
    expected = weight.cpu()
    path = tmp_path / "gpu.pth"
    with AsyncCheckpointSaver() as saver:
        saver.save({"model": {"w": weight}, "step": 1}, path)
        weight.mul_(0)  # the host copy was taken before save() returned
    back = load_checkpoint(path)
    assert back["model"]["w"].device.type == "cpu"
    assert torch.equal(back["model"]["w"], expected)
    on_gpu = load_checkpoint(path, map_location="cuda")
    assert on_gpu["model"]["w"].is_cuda
