"""A real full disk: a 256 KiB tmpfs mounted inside an unprivileged user + mount namespace.

``unshare --user --map-root-user --mount`` needs no root on kernels that allow unprivileged user
namespaces; where it is refused (or ``unshare`` is missing) the test is skipped, not faked.
"""

from __future__ import annotations

import shutil
import sys
import textwrap

import pytest

_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import torch
    from libai.checkpoint import is_complete, load_checkpoint, save_checkpoint, update_latest
    from libai.utils.errors import CheckpointError

    work = Path(sys.argv[1])
    small = {"w": torch.ones(1000)}                      # ~5 KB
    save_checkpoint(small, work / "iter_1.pth")
    update_latest(work, work / "iter_1.pth")
    try:
        save_checkpoint({"w": torch.ones(200_000)}, work / "iter_2.pth")   # ~800 KB > 256 KiB
    except CheckpointError as e:
        msg = str(e)
    else:
        sys.exit("no error on a full disk")
    assert "No space left on device" in msg and "iter_2.pth" in msg, msg
    assert "Free disk space" in msg, msg
    names = sorted(p.name for p in work.iterdir())
    assert names == ["iter_1.pth", "iter_1.pth.manifest.json", "latest_checkpoint"], names
    assert is_complete(work / "iter_1.pth")
    assert torch.equal(load_checkpoint(work / "iter_1.pth")["w"], small["w"])
    assert (work / "latest_checkpoint").read_text().strip() == "iter_1.pth"
    print("FULL-DISK-OK")
    """
)


def _namespace_prefix(mount_dir: str, run_process) -> list[str] | None:
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    probe = run_process(unshare, "--user", "--map-root-user", "--mount", "sh", "-c",
                        f"mount -t tmpfs -o size=256k tmpfs '{mount_dir}'", python=False,
                        timeout=30)
    if probe.returncode != 0:
        return None
    return [unshare, "--user", "--map-root-user", "--mount"]


def test_real_full_disk_keeps_earlier_checkpoint(tmp_path, run_process):
    """A process of its own: the mount lives in a namespace that only a new process can enter."""
    mount_dir = tmp_path / "tiny"
    mount_dir.mkdir()
    prefix = _namespace_prefix(str(mount_dir), run_process)
    if prefix is None:
        pytest.skip("cannot mount a tmpfs in an unprivileged user namespace here")
    script = tmp_path / "fill.py"
    script.write_text(_SCRIPT)
    shell = (
        f"mount -t tmpfs -o size=256k tmpfs '{mount_dir}' && "
        f"'{sys.executable}' '{script}' '{mount_dir}'"
    )
    result = run_process(*prefix, "sh", "-c", shell, python=False, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FULL-DISK-OK" in result.stdout
