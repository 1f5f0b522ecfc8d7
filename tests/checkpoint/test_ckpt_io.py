"""save_checkpoint / load_checkpoint: atomic writes, manifests, refusing bad or unsafe files."""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from libai.checkpoint import (
    _fs,
    is_complete,
    load_checkpoint,
    manifest_path,
    read_manifest,
    save_checkpoint,
    verify_checkpoint,
)
from libai.checkpoint._fs import atomic_write
from libai.utils.errors import CheckpointError


def _state(scale: float = 1.0) -> dict:
    return {
        "model": OrderedDict(w=torch.arange(6.0).reshape(2, 3) * scale, b=torch.zeros(3)),
        "iter": 10,
        "meta": {"name": "run", "lrs": [0.1, 0.01], "shape": (2, 3), "flag": True, "x": None},
    }


def _assert_state_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key])
    assert a["iter"] == b["iter"] and a["meta"] == b["meta"]


def _temp_files(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name]


def test_round_trip_and_manifest_fields(tmp_path):
    path = tmp_path / "iter_10.pth"
    fields = save_checkpoint(_state(), path)
    _assert_state_equal(load_checkpoint(path), _state())
    on_disk = json.loads(manifest_path(path).read_text())
    assert on_disk == fields
    assert on_disk["complete"] is True and on_disk["file"] == "iter_10.pth"
    assert on_disk["size"] == path.stat().st_size
    assert on_disk["torch_version"] == torch.__version__ and "libai_version" in on_disk
    assert len(on_disk["sha256"]) == 64 and on_disk["created"].endswith("Z")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "iter_10.pth",
        "iter_10.pth.manifest.json",
    ]
    assert is_complete(path)


def test_write_goes_through_temp_name_and_fsyncs(tmp_path, monkeypatch):
    path = tmp_path / "a.pth"
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    seen = {}

    def write(f):
        f.write(b"new content")
        seen["final_exists"] = path.exists()
        seen["temps"] = _temp_files(tmp_path)

    atomic_write(path, write)
    assert seen == {"final_exists": False, "temps": [f".a.pth.tmp-{os.getpid()}"]}
    assert path.read_bytes() == b"new content" and not _temp_files(tmp_path)
    assert len(synced) >= 2  # the file, then the folder


def test_failed_write_keeps_old_file_and_removes_temp(tmp_path):
    path = tmp_path / "a.pth"
    path.write_bytes(b"old")

    def write(f):
        f.write(b"half of the new")
        raise ValueError("boom")

    with pytest.raises(CheckpointError, match="boom"):
        atomic_write(path, write)
    assert path.read_bytes() == b"old" and not _temp_files(tmp_path)


class _FullDiskFile(io.FileIO):
    """A real file whose writes fail with ENOSPC after ``budget`` bytes, like a full disk."""

    budget = 200

    def write(self, data) -> int:
        data = memoryview(data).cast("B")
        room = self.budget - self.tell()
        if len(data) > room:
            super().write(data[: max(room, 0)])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


def test_disk_full_keeps_earlier_checkpoints(tmp_path, monkeypatch):
    old = tmp_path / "iter_1.pth"
    save_checkpoint(_state(), old)
    same_path_before = old.read_bytes()
    monkeypatch.setattr(_fs, "open", lambda p, mode: _FullDiskFile(p, mode), raising=False)
    new = tmp_path / "iter_2.pth"
    with pytest.raises(CheckpointError) as info:
        save_checkpoint(_state(2.0), new)
    msg = str(info.value)
    assert str(new) in msg and "No space left on device" in msg
    assert "Free disk space" in msg and "work_dir" in msg
    assert isinstance(info.value.__cause__, OSError)
    # Overwriting an existing checkpoint that fails must leave it complete and loadable too.
    with pytest.raises(CheckpointError, match="No space left"):
        save_checkpoint(_state(3.0), old)
    monkeypatch.undo()
    assert not new.exists() and not manifest_path(new).exists()
    assert not _temp_files(tmp_path)
    assert old.read_bytes() == same_path_before and is_complete(old)
    _assert_state_equal(load_checkpoint(old), _state())


def test_manifest_detects_changed_bytes_and_size(tmp_path):
    path = tmp_path / "a.pth"
    save_checkpoint(_state(), path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"does not match its manifest: sha256"):
        load_checkpoint(path)
    path.write_bytes(bytes(data) + b"x")
    with pytest.raises(CheckpointError, match=r"a.pth' does not match its manifest: size"):
        load_checkpoint(path)
    assert not is_complete(path)


@pytest.mark.parametrize(
    "tamper, expected",
    [
        (lambda m: "{not json", "not valid JSON"),
        (lambda m: json.dumps({**m, "size": m["size"] + 1}), "manifest_sha256 does not match"),
        (lambda m: json.dumps({k: v for k, v in m.items() if k != "sha256"}), "missing"),
        (lambda m: "[1, 2]", "holds a list"),
    ],
)
def test_tampered_manifest_is_detected(tmp_path, tamper, expected):
    path = tmp_path / "a.pth"
    fields = save_checkpoint(_state(), path)
    manifest_path(path).write_text(tamper(fields))
    with pytest.raises(CheckpointError, match=expected) as info:
        load_checkpoint(path)
    assert "a.pth.manifest.json" in str(info.value)
    assert not is_complete(path)
    _assert_state_equal(load_checkpoint(path, verify=False), _state())


def test_manifest_with_wrong_checksum_recomputed_is_still_caught(tmp_path):
    # Someone fixes up manifest_sha256 after editing sha256: the file check still fails.
    from libai.checkpoint.manifest import _self_checksum

    path = tmp_path / "a.pth"
    fields = save_checkpoint(_state(), path)
    fields["sha256"] = "0" * 64
    fields["manifest_sha256"] = _self_checksum(fields)
    manifest_path(path).write_text(json.dumps(fields))
    assert read_manifest(path)["sha256"] == "0" * 64
    with pytest.raises(CheckpointError, match="does not match its manifest"):
        verify_checkpoint(path)


def test_a_checkpoint_renamed_with_its_manifest_loads(tmp_path):
    # The manifest names the file it was written for; a rename of both keeps the bytes, so
    # the sha256 (checked even where only sizes are: is_complete(check_sha256=False)) vouches.
    path, best = tmp_path / "iter_4.pth", tmp_path / "best.pth"
    save_checkpoint(_state(), path)
    os.rename(path, best)
    os.rename(manifest_path(path), manifest_path(best))
    _assert_state_equal(load_checkpoint(best), _state())
    assert is_complete(best, check_sha256=False)
    # a manifest that belongs to another file of the same size: the name is said, not "damaged"
    save_checkpoint(_state(scale=2.0), path)
    os.replace(manifest_path(path), manifest_path(best))
    with pytest.raises(CheckpointError, match=r"best.pth' does not match its manifest, which was "
                       r"written for 'iter_4.pth' \(the name differs\): sha256") as info:
        load_checkpoint(best)
    assert "damaged or was edited" not in str(info.value)
    assert not is_complete(best, check_sha256=False)


def test_truncated_checkpoint(tmp_path):
    path = tmp_path / "a.pth"
    save_checkpoint(_state(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="does not match its manifest: size"):
        load_checkpoint(path)
    manifest_path(path).unlink()  # e.g. a copied file without its manifest
    with pytest.raises(CheckpointError, match=r"a.pth' is truncated or corrupt") as info:
        load_checkpoint(path)
    assert "zipfile" not in str(info.value).lower()


@pytest.mark.parametrize(
    "content, expected",
    [
        (os.urandom(4096), "is not a PyTorch checkpoint"),
        (b"epoch: 3\nloss: 0.1\n", "is not a PyTorch checkpoint"),
        (b"", "is empty"),
        (b"PK\x03\x04" + os.urandom(300), "is truncated or corrupt"),
    ],
    ids=["random", "text", "empty", "zip-header-garbage"],
)
def test_foreign_files_are_refused_with_a_clear_error(tmp_path, content, expected):
    path = tmp_path / "weights.pth"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=expected) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


class _Payload:
    """Pickles into a call of ``open(marker, 'w')``: loading it would create the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("container", ["raw-pickle", "torch-zip"])
def test_malicious_pickle_is_not_executed(tmp_path, container):
    # Control: the payload really does create the marker when unpickled unsafely.
    control = tmp_path / "control-marker"
    pickle.loads(pickle.dumps(_Payload(control), protocol=2)).close()
    assert control.exists()

    marker = tmp_path / "marker"
    path = tmp_path / "evil.pth"
    if container == "raw-pickle":
        path.write_bytes(pickle.dumps({"model": _Payload(marker)}, protocol=2))
    else:
        torch.save({"model": _Payload(marker)}, path)
    with pytest.raises(CheckpointError, match="refusing to unpickle") as info:
        load_checkpoint(path)
    assert "not a libai checkpoint or holds unsafe content" in str(info.value)
    assert not marker.exists()


def test_missing_file_suggests_close_names(tmp_path):
    save_checkpoint(_state(), tmp_path / "iter_100.pth")
    with pytest.raises(
        CheckpointError, match=r"iter_10\.pth' does not exist\. Did you mean 'iter_100"
    ):
        load_checkpoint(tmp_path / "iter_10.pth")
    with pytest.raises(CheckpointError, match=r"Checkpoints in .*: iter_100.pth"):
        load_checkpoint(tmp_path / "zzz.pth")
    with pytest.raises(CheckpointError, match="folder .* does not exist either"):
        load_checkpoint(tmp_path / "nope" / "a.pth")


def test_unsupported_object_is_named_by_key_path(tmp_path):
    class MyHook:
        pass

    def fn(x):
        return x

    cases = [
        ({"hooks": {"MyHook": {"fn": fn}}}, "hooks.MyHook.fn: function"),
        ({"hooks": [{"obj": MyHook()}]}, r"hooks\[0\]\.obj: \S*MyHook"),
        ({"data": {"arr": np.zeros((2, 3))}}, r"data.arr: numpy.ndarray \(shape \(2, 3\)"),
        ({"s": {1, 2}}, "s: set"),
        ({"t": np.datetime64("2024-01-01")}, "t: numpy.datetime64"),
        ({"d": {object(): 1}}, "d: it has a key"),
    ]
    for state, expected in cases:
        with pytest.raises(CheckpointError, match=expected):
            save_checkpoint(state, tmp_path / "a.pth")
    assert not any(tmp_path.iterdir())
    loop: dict = {"a": []}
    loop["a"].append(loop)
    with pytest.raises(CheckpointError, match="a\\[0\\]: it contains itself"):
        save_checkpoint(loop, tmp_path / "a.pth")
    with pytest.raises(CheckpointError, match="must be a dict"):
        save_checkpoint([1, 2], tmp_path / "a.pth")


def test_numpy_scalars_and_torch_types_are_saved(tmp_path):
    path = tmp_path / "a.pth"
    save_checkpoint(
        {
            "n": np.int64(3),
            "f": np.float32(0.5),
            "b": np.bool_(True),
            "dtype": torch.bfloat16,
            "device": torch.device("cpu"),
            "size": torch.Size([2, 3]),
            "param": torch.nn.Parameter(torch.ones(2)),
            3: "int key",
        },
        path,
    )
    back = load_checkpoint(path)
    assert back["n"] == 3 and type(back["n"]) is int
    assert back["f"] == 0.5 and back["b"] is True and back[3] == "int key"
    assert back["dtype"] is torch.bfloat16 and back["size"] == torch.Size([2, 3])


def test_load_refuses_non_dict_and_maps_location(tmp_path):
    path = tmp_path / "t.pth"
    torch.save(torch.ones(2), path)
    with pytest.raises(CheckpointError, match="holds a Tensor, not a dict"):
        load_checkpoint(path)
    torch.save({"w": torch.ones(2)}, path)  # foreign file without manifest: loads unverified
    assert load_checkpoint(path, map_location="meta")["w"].device.type == "meta"
