"""Durable file writes: temp file in the same folder, fsync, rename, fsync the folder.

A reader never sees a half-written file under the final name: until ``os.replace`` the bytes live
under ``.<name>.tmp-<pid>``, and ``os.replace`` is atomic within one file system. The folder is
fsynced afterwards so that the rename itself survives a power cut.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from libai.utils.errors import CheckpointError

__all__ = ["WriteResult", "atomic_write", "fsync_dir", "temp_path_for", "describe_os_error"]


@dataclass(frozen=True)
class WriteResult:
    """What :func:`atomic_write` wrote: the byte count and the sha256 of the bytes."""

    size: int
    sha256: str


class _HashingWriter:
    """File-like object that hashes and counts bytes on their way to the real file.

    ``torch.save`` reports a failing ``write`` as an opaque ``RuntimeError`` from its C++ zip
    writer, so the original ``OSError`` (for example ENOSPC) is kept in :attr:`error`.
    """

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()
        self.size = 0
        self.error: OSError | None = None

    def write(self, data: bytes | memoryview) -> int:
        try:
            written = self._raw.write(data)
        except OSError as e:
            self.error = e
            raise
        self._hash.update(data)
        self.size += memoryview(data).nbytes
        return written

    def flush(self) -> None:
        try:
            self._raw.flush()
        except OSError as e:
            self.error = e
            raise

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def temp_path_for(path: Path) -> Path:
    """The temporary name a file is written under before it is renamed to ``path``."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entry table to disk so that a rename inside it is durable.

    Some file systems (and Windows) cannot open a folder for fsync; that is not an error there.
    """
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def describe_os_error(e: OSError) -> tuple[str, str]:
    """Return ``(cause, fix)`` sentences for an ``OSError`` raised while writing a file."""
    cause = e.strerror or str(e)
    if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        fix = (
            "Free disk space (for example delete old checkpoints) or set work_dir to a disk with "
            "more room"
        )
    elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "Make the folder writable or set work_dir to a writable folder"
    else:
        fix = "Check that the folder exists, is writable and has free space, or change work_dir"
    return cause, fix


def atomic_write(
    path: str | os.PathLike,
    write_fn: Callable[[BinaryIO], None],
    before_replace: Callable[[], None] | None = None,
) -> WriteResult:
    """Write a file atomically and durably.

    ``write_fn`` receives a binary file-like object (it has ``write`` and ``flush``) and writes the
    whole content. On success the file is at ``path``; on failure the temp file is removed, any
    earlier file at ``path`` is untouched and a :class:`CheckpointError` names the path, the cause
    and the fix.

    Args:
        path: Final file name. Its folder must exist.
        write_fn: Callable that writes the content into the given file object.
        before_replace: Called after the new content is durable and just before it takes the
            final name (e.g. to remove what described the old file). Defaults to None.

    Returns:
        The size and sha256 of the bytes written.
    """
    path = Path(path)
    tmp = temp_path_for(path)
    writer: _HashingWriter | None = None
    try:
        with open(tmp, "wb") as raw:
            writer = _HashingWriter(raw)
            write_fn(writer)  # type: ignore[arg-type]
            writer.flush()
            os.fsync(raw.fileno())
            on_disk = os.fstat(raw.fileno()).st_size
        if on_disk != writer.size:
            raise OSError(errno.EIO, f"wrote {writer.size} bytes but the file has {on_disk}")
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException as e:
        _remove_quietly(tmp)
        if isinstance(e, KeyboardInterrupt | SystemExit):
            raise
        os_error = writer.error if writer is not None and writer.error is not None else None
        if os_error is None and isinstance(e, OSError):
            os_error = e
        if os_error is None:
            if isinstance(e, CheckpointError):
                raise
            raise CheckpointError(f"Could not write '{path}': {type(e).__name__}: {e}") from e
        cause, fix = describe_os_error(os_error)
        raise CheckpointError(
            f"Could not write '{path}': {cause}. {fix}. The partial file was removed; earlier "
            "checkpoints are untouched."
        ) from os_error
    return WriteResult(size=writer.size, sha256=writer.hexdigest())


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        # Best effort: a leftover temp file is ignored by every reader (its name starts with ".").
        pass
