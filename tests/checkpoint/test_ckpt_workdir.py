"""The latest pointer, find_resumable's fallback, listing and removing checkpoints."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest
import torch

from libai.checkpoint import (
    LATEST_NAME,
    find_resumable,
    is_complete,
    list_checkpoints,
    manifest_path,
    read_latest,
    remove_checkpoint,
    save_checkpoint,
    update_latest,
)
from libai.utils.errors import CheckpointError


def _save(work_dir, name, pointer=True):
    path = work_dir / name
    save_checkpoint({"w": torch.full((4,), float(len(name)))}, path)
    if pointer:
        update_latest(work_dir, path)
    return path


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_update_latest_writes_relative_name(tmp_path):
    path = _save(tmp_path, "iter_1.pth")
    assert (tmp_path / LATEST_NAME).read_text() == "iter_1.pth\n"
    assert read_latest(tmp_path) == path
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]
    assert find_resumable(tmp_path) == path


def test_update_latest_refuses_unfinished_checkpoint(tmp_path):
    torch.save({"w": torch.ones(1)}, tmp_path / "raw.pth")  # no manifest
    with pytest.raises(CheckpointError, match="Refusing to point latest_checkpoint.*no manifest"):
        update_latest(tmp_path, tmp_path / "raw.pth")
    assert not (tmp_path / LATEST_NAME).exists()


def test_find_resumable_falls_back_when_latest_is_corrupt(tmp_path, caplog):
    good = _save(tmp_path, "iter_1.pth")
    bad = _save(tmp_path, "iter_2.pth")
    _truncate(bad)
    logger = logging.getLogger("test.resume")
    with caplog.at_level(logging.WARNING, logger="test.resume"):
        assert find_resumable(tmp_path, logger=logger) == good
    [record] = caplog.records
    msg = record.getMessage()
    assert "iter_2.pth" in msg and "does not match its manifest" in msg
    assert f"Resuming from '{good}' instead" in msg


def test_find_resumable_skips_checkpoints_without_valid_manifest(tmp_path, libai_log):
    good = _save(tmp_path, "iter_1.pth", pointer=False)
    time.sleep(0.01)
    torch.save({"w": torch.ones(1)}, tmp_path / "iter_3.pth")  # newest, but no manifest
    tampered = _save(tmp_path, "iter_2.pth")
    manifest_path(tampered).write_text("{broken")
    assert find_resumable(tmp_path) == good
    msg = libai_log[-1]
    assert "iter_2.pth.manifest.json" in msg and "not valid JSON" in msg
    assert "Skipped incomplete or damaged checkpoints: iter_3.pth" in msg
    assert str(good) in msg


def test_find_resumable_with_missing_target_or_pointer(tmp_path, libai_log):
    assert find_resumable(tmp_path) is None
    assert find_resumable(tmp_path / "does-not-exist") is None
    first = _save(tmp_path, "iter_1.pth")
    second = _save(tmp_path, "iter_2.pth")
    remove_checkpoint(second)
    assert find_resumable(tmp_path) == first
    assert "iter_2.pth" in libai_log[-1]
    (tmp_path / LATEST_NAME).unlink()  # crash between manifest and pointer update
    assert find_resumable(tmp_path) == first
    assert "does not exist" in libai_log[-1]
    (tmp_path / LATEST_NAME).write_text("")
    assert find_resumable(tmp_path) == first
    assert "damaged" in libai_log[-1]


def test_find_resumable_returns_none_when_nothing_verifies(tmp_path, libai_log):
    only = _save(tmp_path, "iter_1.pth")
    _truncate(only)
    assert find_resumable(tmp_path) is None
    assert "nothing to resume" in libai_log[-1]


def test_list_checkpoints_orders_by_manifest_time(tmp_path):
    a = _save(tmp_path, "b_first.pth", pointer=False)
    b = _save(tmp_path, "a_second.pt", pointer=False)
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / ".c.pth.tmp-123").write_bytes(b"partial")
    # Manifest time wins over mtime: touch the older file so its mtime is newest.
    os.utime(a, (time.time() + 100, time.time() + 100))
    raw = tmp_path / "raw.ckpt"
    torch.save({}, raw)
    os.utime(raw, (1, 1))  # no manifest: mtime from 1970 makes it the oldest
    assert list_checkpoints(tmp_path) == [raw, a, b]
    assert list_checkpoints(tmp_path, complete_only=True) == [a, b]
    fields = json.loads(manifest_path(a).read_text())
    assert fields["created_unix"] <= json.loads(manifest_path(b).read_text())["created_unix"]


def test_remove_checkpoint_removes_file_and_manifest(tmp_path):
    path = _save(tmp_path, "iter_1.pth", pointer=False)
    assert is_complete(path)
    remove_checkpoint(path)
    assert list(tmp_path.iterdir()) == []
    remove_checkpoint(path)  # already gone: fine


def test_find_resumable_sends_a_path_inside_the_work_dir_relative_to_it(tmp_path, monkeypatch):
    """Device: CPU, one process standing in for rank 0 and for a rank of another node. Rank 0
    broadcasts its choice; a node that mounts the shared work dir at another path opens the
    checkpoint under its own mount (docs/cluster.md), not under rank 0's."""
    from libai.utils import dist

    shared = tmp_path / "node0-mount"
    shared.mkdir()
    path = _save(shared, "iter_4.pth")
    sent = []
    monkeypatch.setattr(dist, "broadcast_object", lambda obj: sent.append(obj) or obj)
    assert find_resumable(shared) == path
    assert sent == ["iter_4.pth"]  # relative: rank 0's mount point does not travel
    other = tmp_path / "node1-mount"
    other.symlink_to(shared)
    monkeypatch.setattr(dist, "is_main_process", lambda: False)
    monkeypatch.setattr(dist, "broadcast_object", lambda obj: sent[0])
    assert find_resumable(other) == other / "iter_4.pth"
