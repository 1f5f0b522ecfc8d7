"""One run at a time in a work dir: ``work_dir/.libai_lock`` names the run that holds it.

Two runs writing into one work dir save over each other's checkpoints and move its latest
pointer back and forth. The runner takes this lock before it creates its run folder (rank 0 only
under torchrun) and gives it back when the process ends, after an error too. A second run is
refused with one line naming the first (its PID, host, start time and command). A lock left by a
run that was killed (``kill -9``, a crash: its PID is gone on this host) does not block: the next
run takes it over and says so. A lock from another host cannot be checked from here: it blocks,
and the message says which file to delete when that run is known to be gone.

>>> import tempfile
>>> work = tempfile.mkdtemp()
>>> lock = acquire(work)
>>> holder(work)["pid"] == os.getpid()
True
>>> release(lock)
>>> holder(work) is None
True
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
import weakref
from typing import Any

from .errors import ConfigError

__all__ = ["LOCK_NAME", "WorkDirLock", "acquire", "holder", "release"]

LOCK_NAME = ".libai_lock"


class WorkDirLock:
    """A lock this process holds on a work dir (:func:`acquire`). Released by :func:`release`,
    when the object is collected, or when the process exits."""

    def __init__(self, path: str, token: str) -> None:
        self.path, self.token = path, token
        self._finalizer = weakref.finalize(self, _remove_if_ours, path, token)

    def release(self) -> None:
        self._finalizer()


def holder(work_dir: str) -> dict[str, Any] | None:
    """What the lock file of ``work_dir`` says (pid, host, started, command), or None without one.
    A file that cannot be read as such gives ``{}``."""
    try:
        with open(os.path.join(work_dir, LOCK_NAME), encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def acquire(work_dir: str) -> WorkDirLock:
    """Take the lock of ``work_dir`` (created if missing) for this process.

    Raises:
        ConfigError: another live run holds it; the message names it and the ways out.
    """
    os.makedirs(work_dir, exist_ok=True)
    path = os.path.join(work_dir, LOCK_NAME)
    token = f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}"
    record = {"pid": os.getpid(), "host": socket.gethostname(), "token": token,
              "process": _process_identity(os.getpid()),
              "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)}
    for _ in range(5):
        if _create(path, json.dumps(record)):
            return WorkDirLock(path, token)
        other = holder(work_dir)
        if other is None:  # released in between: try again
            continue
        if _alive(other):
            raise ConfigError(_busy_line(work_dir, other))
        _remove_stale(path, other)
    raise ConfigError(f"Could not take the lock {path}: other runs keep starting in {work_dir}; "
                      f"give this run its own --work-dir.")


def _create(path: str, text: str) -> bool:
    """Create ``path`` holding ``text`` unless it exists; False when it does. The file appears
    with its contents (a hard link of a finished temporary file) where the file system allows."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError as e:  # no hard links here: an exclusive create instead
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return True
    finally:
        os.unlink(tmp)


def release(lock: WorkDirLock | None) -> None:
    """Give the lock back (removing the file only while it is still this lock's)."""
    if lock is not None:
        lock.release()


def _alive(record: dict[str, Any]) -> bool:
    """False only when the holder is surely gone: its PID does not exist on this host."""
    pid, host = record.get("pid"), record.get("host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return True  # another host's run, or a file that cannot be read: evidence, kept
    if pid == os.getpid():
        return False  # an earlier run of this process (a script training twice): ours to take
    if os.name == "nt":  # os.kill(pid, 0) would end the process there, not probe it
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a live process of another user
        pass
    # the PID lives; is it still the run's process, or was the number reused (after a reboot)?
    then, now = record.get("process"), _process_identity(pid)
    return not (then and now and then != now)


def _process_identity(pid: int) -> str | None:
    """What tells a process from a later one with the same PID: the boot and its start time
    (Linux's /proc); None where that cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return f"{boot}:{fields[19]}"  # field 22 of stat: the start time, in clock ticks
    except (OSError, IndexError):
        return None


def _remove_stale(path: str, record: dict[str, Any]) -> None:
    if record.get("pid") != os.getpid():
        print(f"libai: {path}: the run that held it (PID {record.get('pid')}, started "
              f"{record.get('started')}) is gone; taking the lock over.", file=sys.stderr)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _remove_if_ours(path: str, token: str) -> None:
    try:
        with open(path, encoding="utf-8") as f:
            ours = json.load(f).get("token") == token
    except (OSError, ValueError, AttributeError):
        return
    if ours:
        try:
            os.unlink(path)
        except OSError:
            pass


def _busy_line(work_dir: str, other: dict[str, Any]) -> str:
    if not other:
        return (f"{work_dir} is in use: its lock file {os.path.join(work_dir, LOCK_NAME)} cannot "
                f"be read. Wait for the other run, pass another --work-dir, or delete the file "
                f"if no run is using the work dir.")
    where = "this host" if other.get("host") == socket.gethostname() else f"host {other.get('host')}"
    command = f" ({other['command']})" if other.get("command") else ""
    gone = ("" if other.get("host") == socket.gethostname() else
            f" If that run is gone, delete {os.path.join(work_dir, LOCK_NAME)}.")
    return (f"{work_dir} is in use by another run: PID {other.get('pid')} on {where}, started "
            f"{other.get('started')}{command}. Wait for it to end, or give this run another "
            f"work dir (--work-dir).{gone}")
