"""A checkpoint save that fails (the disk fills up while it is written) never costs the run its
earlier checkpoint: with on_error='raise' training stops with a clear error and can be resumed
from the previous checkpoint; with on_error='warn' it trains on and saves again later."""

import errno
import logging
import os
import re

import pytest
import resume_helpers as rh

import libai.checkpoint._fs as checkpoint_fs
from libai.checkpoint import is_complete, list_checkpoints, load_checkpoint, read_latest
from libai.runner import Runner
from libai.utils.errors import CheckpointError

N = 12
_TEMP_CHECKPOINT = re.compile(r"^\.iter_\d+\.pth\.tmp-\d+$")


class _DiskFullFile:
    """A file being written on a disk with ``room`` bytes left: the write that would go past it
    fails with ENOSPC, as the operating system's write() does."""

    def __init__(self, raw, room):
        self._raw = raw
        self._room = room

    def write(self, data):
        size = memoryview(data).nbytes
        if size > self._room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= size
        return self._raw.write(data)

    def __getattr__(self, name):  # flush, fileno, close ...
        return getattr(self._raw, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._raw.close()


@pytest.fixture
def disk_full_on_second_save(monkeypatch):
    """The 2nd checkpoint file written fills the disk after 4 KiB; returns the names tried."""
    tried = []

    def fake_open(path, mode="r", *args, **kwargs):
        raw = open(path, mode, *args, **kwargs)
        if "w" in mode and _TEMP_CHECKPOINT.match(os.path.basename(path)):
            tried.append(os.path.basename(path))
            if len(tried) == 2:
                return _DiskFullFile(raw, room=4096)
        return raw

    # the module opens its temp files with the builtin open(); shadow it in that module only
    monkeypatch.setattr(checkpoint_fs, "open", fake_open, raising=False)
    return tried


def failing_config(work_dir, on_error):
    return rh.contract_config(
        work_dir, acc=3, max_iters=N, checkpoint=dict(interval=2, on_error=on_error)
    )


def test_disk_full_stops_training_and_keeps_the_previous_checkpoint(
    tmp_path, disk_full_on_second_save, monkeypatch
):
    work = tmp_path / "run"
    runner = Runner.from_cfg(failing_config(work, "raise"))
    with pytest.raises(CheckpointError) as exc:
        runner.train()
    message = str(exc.value)
    assert str(work / "iter_4.pth") in message
    assert "No space left on device" in message
    assert len(disk_full_on_second_save) == 2

    assert [p.name for p in list_checkpoints(work)] == ["iter_2.pth"]
    assert is_complete(work / "iter_2.pth")
    assert load_checkpoint(work / "iter_2.pth")["loop"]["iter"] == 2
    assert read_latest(work) == work / "iter_2.pth"
    assert not [f for f in os.listdir(work) if ".tmp-" in f]  # the partial file was removed

    # space is back: resuming continues from iter_2 as if nothing had happened
    monkeypatch.undo()
    straight = rh.train(failing_config(tmp_path / "straight", "raise"))
    resumed = Runner.from_cfg(dict(failing_config(work, "raise"), resume=True, log_level="INFO"))
    records = rh.LogRecords()
    logging.getLogger("libai").addHandler(records)
    try:
        resumed.train()
    finally:
        logging.getLogger("libai").removeHandler(records)
    assert any(f"Resumed from {work / 'iter_2.pth'}" in m for m in records.messages)
    assert resumed.iter == N
    rh.assert_same_model(straight.unwrapped_model, resumed.unwrapped_model)
    rh.assert_same_logs(tmp_path / "straight", work, N)


def test_disk_full_with_on_error_warn_trains_on_and_saves_later(tmp_path, disk_full_on_second_save):
    work = tmp_path / "run"
    runner = Runner.from_cfg(failing_config(work, "warn"))
    records = rh.LogRecords()
    logging.getLogger("libai").addHandler(records)
    try:
        runner.train()
    finally:
        logging.getLogger("libai").removeHandler(records)

    assert runner.iter == N
    errors = [m for m in records.messages if "No space left on device" in m]
    assert len(errors) == 1 and "iter_4.pth" in errors[0]
    names = [p.name for p in list_checkpoints(work)]
    assert names == [f"iter_{i}.pth" for i in (2, 6, 8, 10, 12)]
    for path in list_checkpoints(work):
        assert is_complete(path)
        load_checkpoint(path)
    assert read_latest(work) == work / f"iter_{N}.pth"
    assert not [f for f in os.listdir(work) if ".tmp-" in f]
    # a failed save changes nothing in the training itself
    straight = rh.train(failing_config(tmp_path / "straight", "warn"))
    rh.assert_same_model(straight.unwrapped_model, runner.unwrapped_model)
