"""How the processes of one or several machines agree on who builds a corpus into the cache
(:func:`libai.data.text.sources.load_corpus`), whether each node has a cache of its own or all
share one on a network disk (docs/cluster.md).

- The lock is ``flock`` on ``<folder>.lock``: one builder among all the processes that reach the
  file, the others wait; the OS releases it when its holder dies. On a disk that refuses ``flock``
  (Lustre mounted without it, some NFS setups: ``ENOSYS``, ``EOPNOTSUPP``, ``ENOLCK``) the lock is
  the exclusive creation of ``<folder>.building`` instead, which names its holder.
- A build writes into ``<folder>.tmp-<host>-<pid>`` and renames it into place, so that the folder
  appears complete or not at all. A lock that reaches only one node (a node-local ``flock``) can
  let two nodes build at once: the second rename finds the folder there, and that node keeps it.
  Only the temporary folders of this host's dead processes are leftovers: another node's may be
  a build still running.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from libai.utils.logging import print_log

try:
    import fcntl
except ImportError:  # Windows: no cross-process lock; start one process first to build
    fcntl = None

__all__ = ["builder", "locked", "temporary_folder", "leftover_folders"]

# what a disk without flock answers (Lustre without -o flock: ENOSYS; NFS without lockd: ENOLCK)
_NO_FLOCK = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL)
_POLL_S = 0.5


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", socket.gethostname()) or "host"


def builder() -> dict[str, object]:
    """Who builds (meta.json's ``built_by``): host, process, and the launcher's ranks, if any
    (``node``: the agent's rank among the nodes, torchrun's ``GROUP_RANK``)."""
    env = os.environ
    return {"host": socket.gethostname(), "pid": os.getpid(), "rank": env.get("RANK"),
            "local_rank": env.get("LOCAL_RANK"), "node": env.get("GROUP_RANK")}


def temporary_folder(folder: Path) -> Path:
    """Where this process builds ``folder`` before renaming it into place."""
    return folder.with_name(f"{folder.name}.tmp-{_host()}-{os.getpid()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def leftover_folders(folder: Path) -> list[Path]:
    """The temporary folders of ``folder``'s builds that died: this host's, whose process is
    gone (the names of older releases, ``tmp-<pid>``, count as this host's)."""
    found = []
    for tmp in folder.parent.glob(f"{folder.name}.tmp-*"):
        host, _, pid = tmp.name[len(folder.name) + 5:].rpartition("-")
        if pid.isdigit() and host in ("", _host()) and not _alive(int(pid)):
            found.append(tmp)
    return found


@contextmanager
def locked(lock_path: Path, folder: Path) -> Iterator[None]:
    """Hold the build lock of ``folder`` (module docstring); wait while another process holds
    it."""
    if fcntl is None:
        yield
        return
    with open(lock_path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print_log(f"Waiting for another process to build {folder} ...")
            fcntl.flock(f, fcntl.LOCK_EX)
        except OSError as e:
            if e.errno not in _NO_FLOCK:
                raise
            with _lock_file(folder.with_name(folder.name + ".building"), folder):
                yield
            return
        yield


@contextmanager
def _lock_file(path: Path, folder: Path) -> Iterator[None]:
    """The lock on a disk without flock: ``path`` created exclusively, naming its holder. A lock
    left by a dead process of this host is taken over; one of another host is waited for, and
    the message says which file to delete if that build is gone."""
    told = False
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            holder = _holder(path)
            if holder.get("host") == socket.gethostname() and not _alive(int(holder["pid"])):
                path.unlink(missing_ok=True)  # its process died: no build is running
                continue
            if (folder / "meta.json").is_file():
                yield  # built meanwhile: the caller finds it so
                return
            if not told:
                print_log(f"Waiting for {holder.get('host', '?')} (process "
                          f"{holder.get('pid', '?')}) to build {folder}; the disk has no flock. "
                          f"If that build is gone, delete {path}.")
                told = True
            time.sleep(_POLL_S)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(builder(), f)
        yield
    finally:
        path.unlink(missing_ok=True)


def _holder(path: Path) -> dict:
    try:
        holder = json.loads(path.read_text())
        int(holder["pid"])
        return holder
    except (OSError, ValueError, KeyError, TypeError):  # being written, or gone meanwhile
        return {"pid": -1}
