"""A damaged checkpoint is never overwritten or deleted (issue 17, "Never destroy a file").

Each scenario walks the work dir before and after and compares bytes: every file that existed
before is unchanged, or moved to ``*.damaged`` with identical bytes, or is one libai wrote itself
and superseded (the ``latest_checkpoint`` pointer), or a log that only grew (appended).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch

from libai.checkpoint import (
    damaged_checkpoints,
    is_complete,
    move_aside,
    remove_checkpoint,
    save_checkpoint,
)
from libai.config import Config
from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.errors import CheckpointError


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder``: relative path -> content."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def assert_nothing_destroyed(before: dict[str, bytes], after: dict[str, bytes]) -> list[str]:
    """Check the guarantee; return the files that were moved aside."""
    moved = []
    for name, old in before.items():
        new = after.get(name)
        if new == old:
            continue
        aside = after.get(name + ".damaged")
        if aside == old:
            moved.append(name)
        elif name == "latest_checkpoint" and new is not None:
            pass  # libai's own pointer, replaced atomically by a newer complete checkpoint
        elif name.endswith(".jsonl") and new is not None and new.startswith(old):
            pass  # a log appended to
        else:
            sha = hashlib.sha256(old).hexdigest()[:12]
            raise AssertionError(f"{name} (sha256 {sha}...) was overwritten or deleted")
    return moved


def _cfg(work: Path, **extra) -> Config:
    cfg = toy_config(work_dir=str(work), train_cfg=dict(max_iters=2, val_interval=100),
                     val_dataloader=None, val_cfg=None, val_evaluator=None, **extra)
    cfg["default_hooks"] = dict(throughput=None, logger=dict(plot=False))  # no plot process
    return Config(cfg)


def _damaged_work_dir(tmp_path: Path) -> Path:
    """A work dir whose only checkpoint, iter_2.pth, was truncated after it was written."""
    work = tmp_path / "work"
    Runner.from_cfg(_cfg(work)).train()
    ckpt = work / "iter_2.pth"
    assert is_complete(ckpt)
    with open(ckpt, "r+b") as f:
        f.truncate(ckpt.stat().st_size // 2)
    return work


def test_resume_with_only_damaged_checkpoints_stops_and_changes_nothing(tmp_path):
    work = _damaged_work_dir(tmp_path)
    before = snapshot(work)
    runner = Runner.from_cfg(_cfg(work, resume=True))
    with pytest.raises(CheckpointError) as exc:
        runner.train()
    message = str(exc.value)
    assert "iter_2.pth" in message and "--move-damaged" in message and "\n" not in message
    assert assert_nothing_destroyed(before, snapshot(work)) == []


def test_move_damaged_keeps_every_byte_then_trains(tmp_path):
    work = _damaged_work_dir(tmp_path)
    before = snapshot(work)
    Runner.from_cfg(_cfg(work, resume=True, resume_options=dict(damaged="rename"))).train()
    after = snapshot(work)
    assert sorted(assert_nothing_destroyed(before, after)) == [
        "iter_2.pth", "iter_2.pth.manifest.json"]
    assert is_complete(work / "iter_2.pth")  # the fresh run's own checkpoint


def test_resume_moves_an_unfinished_checkpoint_aside_and_starts_fresh(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "iter_2.pth").write_bytes(b"cut short by kill -9 before its manifest")
    before = snapshot(work)
    Runner.from_cfg(_cfg(work, resume=True)).train()  # a restarted worker must not be stuck
    assert assert_nothing_destroyed(before, snapshot(work)) == ["iter_2.pth"]


def test_fresh_run_moves_a_damaged_checkpoint_aside_before_saving_over_its_name(tmp_path):
    work = _damaged_work_dir(tmp_path)
    before = snapshot(work)
    Runner.from_cfg(_cfg(work)).train()  # no --resume: starts fresh, saves iter_2.pth again
    moved = assert_nothing_destroyed(before, snapshot(work))
    assert "iter_2.pth" in moved and is_complete(work / "iter_2.pth")


def test_a_file_libai_did_not_write_is_never_saved_over(tmp_path):
    path = tmp_path / "iter_5.pth"
    path.write_bytes(b"the user's own weights, no manifest")
    before = snapshot(tmp_path)
    save_checkpoint({"w": torch.zeros(2)}, path)
    assert assert_nothing_destroyed(before, snapshot(tmp_path)) == ["iter_5.pth"]
    assert is_complete(path)


def test_rotation_never_deletes_an_incomplete_checkpoint(tmp_path):
    path = tmp_path / "iter_1.pth"
    save_checkpoint({"w": torch.zeros(100)}, path)
    with open(path, "ab") as f:
        f.write(b"appended later")  # no longer what libai wrote
    before = snapshot(tmp_path)
    remove_checkpoint(path)
    assert sorted(assert_nothing_destroyed(before, snapshot(tmp_path))) == [
        "iter_1.pth", "iter_1.pth.manifest.json"]
    complete = tmp_path / "iter_2.pth"
    save_checkpoint({"w": torch.zeros(2)}, complete)
    remove_checkpoint(complete)  # a complete one it wrote is deleted, with its manifest
    assert not complete.exists() and not Path(str(complete) + ".manifest.json").exists()


def test_move_aside_never_overwrites_an_earlier_damaged_copy(tmp_path):
    path = tmp_path / "iter_1.pth"
    for content in (b"first", b"second"):
        path.write_bytes(content)
        move_aside(path)
    assert (tmp_path / "iter_1.pth.damaged").read_bytes() == b"first"
    assert (tmp_path / "iter_1.pth.damaged.1").read_bytes() == b"second"
    assert damaged_checkpoints(tmp_path) == []  # *.damaged files are not checkpoints any more


def test_damaged_checkpoints_lists_truncated_and_unfinished(tmp_path):
    good, cut = tmp_path / "iter_1.pth", tmp_path / "iter_2.pth"
    save_checkpoint({"w": torch.zeros(10)}, good)
    save_checkpoint({"w": torch.zeros(10)}, cut)
    os.truncate(cut, 10)
    (tmp_path / "iter_3.pth").write_bytes(b"no manifest: unfinished")
    assert [p.name for p in damaged_checkpoints(tmp_path)] == ["iter_2.pth", "iter_3.pth"]
