"""Save checkpoints in a background thread so that training waits only for a host copy.

Timeline of ``saver.save(state, path, on_done)``::

    caller:      wait for the previous save -> check + copy tensors to CPU -> return
    background:  write file (atomic) -> write manifest -> on_done(path) e.g. update_latest, prune

Because ``on_done`` runs only after the manifest is on disk, a crash at any point leaves the
``latest_checkpoint`` pointer naming a complete checkpoint.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from libai.utils.errors import CheckpointError

from .io import write_checked_state
from .state import copy_state_to_host

__all__ = ["AsyncCheckpointSaver", "finish_saves"]


class AsyncCheckpointSaver:
    """Writes one checkpoint at a time in a background thread.

    ``save()`` blocks while ``state`` is checked and its tensors are copied to CPU memory (so
    training may change the originals right away), then returns. Errors from the background write
    are raised by the next ``save()``, ``wait()`` or ``close()`` as :class:`CheckpointError`. The
    thread is not a daemon: a normal interpreter exit waits for the write to finish.

    Host memory holds one extra copy of the state while a save is in flight.

    Example::

        saver = AsyncCheckpointSaver()
        saver.save(state, path, on_done=lambda p: update_latest(work_dir, p))
        ...
        saver.close()          # at the end of training; raises if the last save failed
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._failed_path: Path | None = None
        self._closed = False

    @property
    def pending(self) -> bool:
        """True while a background save is running."""
        return self._thread is not None and self._thread.is_alive()

    def save(
        self,
        state: dict[str, Any],
        path: str | os.PathLike,
        on_done: Callable[[Path], None] | None = None,
        prepare: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """Start saving ``state`` to ``path``; returns once the tensors are copied to CPU.

        Args:
            state: Checkpoint content (see :func:`~libai.checkpoint.save_checkpoint`).
            path: Destination file.
            on_done: Called in the background thread with the path after the file and its
                manifest are complete (e.g. to update the latest pointer and prune old files).
                Defaults to None.
            prepare: Called in the background thread with the host copy of ``state`` before
                the write; it may wait for other work and add entries (the listing of a sharded
                checkpoint's folder, once its shards are written). Defaults to None.

        Raises:
            CheckpointError: The saver is closed, the previous background save failed, or
                ``state`` holds an unsupported entry.
        """
        if self._closed:
            raise CheckpointError("AsyncCheckpointSaver is closed; create a new one to save.")
        self.wait()
        host_state = copy_state_to_host(state)
        self._thread = threading.Thread(
            target=self._run,
            args=(host_state, Path(path), on_done, prepare),
            name="libai-checkpoint-save",
            daemon=False,
        )
        self._thread.start()

    def _run(self, state: dict[str, Any], path: Path, on_done: Callable[[Path], None] | None,
             prepare: Callable[[dict[str, Any]], None] | None) -> None:
        try:
            if prepare is not None:
                prepare(state)
            write_checked_state(state, path)
            if on_done is not None:
                on_done(path)
        except BaseException as e:  # handed to the caller by wait()
            self._error, self._failed_path = e, path

    def wait(self) -> None:
        """Block until the running save (if any) is finished.

        Raises:
            CheckpointError: The background save failed; raised once, then the saver is usable
                again.
        """
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, path = self._error, self._failed_path
        self._error = self._failed_path = None
        if error is None:
            return
        if isinstance(error, CheckpointError):
            raise CheckpointError(f"Background checkpoint save failed: {error}") from error
        raise CheckpointError(
            f"Background checkpoint save of '{path}' failed: {type(error).__name__}: {error}. "
            "If the file and its manifest exist the checkpoint itself is complete and the on_done "
            "callback failed."
        ) from error

    def close(self) -> None:
        """Wait for the last save and refuse new ones; raises its error like :meth:`wait`."""
        self._closed = True
        self.wait()

    def __enter__(self) -> AsyncCheckpointSaver:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def finish_saves(saver: AsyncCheckpointSaver | None, shards: Any) -> CheckpointError | None:
    """Wait for one rank's save in flight (no collective): the writer of the file (rank 0's
    ``saver``), which finishes the shards first, and the ``shards`` (a
    :class:`~libai.checkpoint.sharded.PendingShards`) of a save whose file was never started,
    and of ranks > 0. Returns the failure rather than raise it."""
    error = None
    if saver is not None:
        try:
            saver.wait()
        except CheckpointError as e:
            error = e
    if shards is not None:
        try:
            shards.result()
        except Exception as e:  # DCP raises a rank's write error on every rank
            error = error or CheckpointError(f"Background save of the shards failed: {e}")
    return error
