"""Where LoggerHook writes scalars: a JSON-lines file and TensorBoard event files.

A backend is opened once per run with the run's log folder and, after a resume, the last
iteration the restored state had reached: everything a previous attempt wrote *after* that step
is dropped, so that curves neither repeat nor go backwards. Steps are train iterations (the
number completed), for validation metrics too.

To add a backend, subclass :class:`BaseLogBackend`, register it with
``@LOG_BACKENDS.register_module()`` and list it in ``LoggerHook(backends=[dict(type=...)])``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from libai.registry import LOG_BACKENDS

__all__ = ["BaseLogBackend", "JsonlBackend", "TensorboardBackend", "default_backends"]

_logger = logging.getLogger("libai")


class BaseLogBackend:
    """Interface of a scalar sink. Only rank 0 opens and writes backends."""

    def open(self, log_dir: str, resume_step: int | None = None) -> None:
        """Prepare to write into ``log_dir``.

        Args:
            log_dir: The run's log folder (exists).
            resume_step: The step training resumes from; entries with a larger step that an
                earlier attempt left behind must be dropped. Defaults to None (a fresh run).
        """

    def add_scalars(self, scalars: dict[str, float], step: int) -> None:
        """Record ``{tag: value}`` at ``step``."""
        raise NotImplementedError(f"{type(self).__name__} must implement add_scalars")

    def flush(self) -> None:
        """Write what was added so far to disk (LoggerHook calls it before each checkpoint)."""

    def close(self) -> None:
        """Flush and release files."""


class _BatchedBackend(BaseLogBackend):
    """Keeps added rows and writes them together: every ``flush_secs``, on ``flush()`` (before
    each checkpoint save) and on ``close()`` (the end of the run, also by an exception or
    Ctrl-C). Written one by one between training steps, with the caches cold, a row costs
    several times more. Subclasses implement ``_accepts`` and ``_write_rows``."""

    def __init__(self, flush_secs: float) -> None:
        self.flush_secs = flush_secs
        self._pending: list[tuple[int, float, dict[str, float]]] = []  # (step, wall time, row)
        self._flushed_at = time.monotonic()

    def _accepts(self) -> bool:
        """Whether rows are kept (False: the backend is off and drops them)."""
        raise NotImplementedError

    def _write_rows(self, rows: list[tuple[int, float, dict[str, float]]]) -> None:
        raise NotImplementedError

    def add_scalars(self, scalars: dict[str, float], step: int) -> None:
        if not self._accepts():
            return
        self._pending.append((int(step), time.time(), dict(scalars)))
        if time.monotonic() - self._flushed_at >= self.flush_secs:
            self.flush()

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending:
            self._write_rows(pending)
        self._flushed_at = time.monotonic()


@LOG_BACKENDS.register_module()
class JsonlBackend(_BatchedBackend):
    """One JSON object per line: ``{"step": 120, "train/loss": 0.43, "train/lr": 0.001}``.

    Rows are kept in memory and written every ``flush_secs``, before each checkpoint save and
    when the run ends, also by an exception or Ctrl-C (written one by one between training
    steps, with cold caches, each costs several times more). So after a resume the file is
    complete up to the checkpoint; only a killed process loses at most ``flush_secs`` of rows.
    Reopened after a resume, the lines with ``step > resume_step`` are removed (the file is
    rewritten through a temporary file and an atomic rename).

    Args:
        filename: File name inside the log folder. Defaults to 'scalars.jsonl'.
        flush_secs: Longest time added rows wait before reaching the file. Defaults to 10.
    """

    def __init__(self, filename: str = "scalars.jsonl", flush_secs: float = 10) -> None:
        super().__init__(flush_secs)
        self.filename = filename
        self.path: str | None = None
        self._file: Any = None

    def open(self, log_dir: str, resume_step: int | None = None) -> None:
        self.path = os.path.join(log_dir, self.filename)
        if resume_step is not None and os.path.exists(self.path):
            self._truncate(self.path, resume_step)
        self._file = open(self.path, "a", encoding="utf-8")
        self._flushed_at = time.monotonic()

    @staticmethod
    def _truncate(path: str, resume_step: int) -> None:
        kept, dropped = [], 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:  # a line cut short by a crash
                    dropped += 1
                    continue
                if isinstance(row, dict) and row.get("step", -1) <= resume_step:
                    kept.append(line if line.endswith("\n") else line + "\n")
                else:
                    dropped += 1
        if dropped:
            tmp = f"{path}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(kept)
            os.replace(tmp, path)

    def _accepts(self) -> bool:
        if self._file is None:
            raise RuntimeError("JsonlBackend.add_scalars called before open()")
        return True

    def _write_rows(self, rows: list[tuple[int, float, dict[str, float]]]) -> None:
        self._file.write("".join(json.dumps({"step": step, **row}) + "\n" for step, _, row in rows))
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None


_tb_warned = False


@LOG_BACKENDS.register_module()
class TensorboardBackend(_BatchedBackend):
    """TensorBoard event files (``events.out.tfevents.*``) in ``<log dir>/<dirname>``.

    Written by libai's own event writer (``_tb_events.EventFileWriter``): the same records as
    ``torch.utils.tensorboard.SummaryWriter``, framed in the training thread instead of a writer
    thread that competes with training for the GIL. After a resume the file starts with a purge
    marker at ``resume_step + 1``: TensorBoard then hides what an earlier attempt logged past the
    resumed step. Without the ``tensorboard`` package this backend warns once and writes
    nothing.

    Events are kept and written every ``flush_secs``, before each checkpoint save and at the
    end of the run, not at every write.

    Args:
        dirname: Folder inside the log folder. Defaults to 'tensorboard'.
        flush_secs: Longest time written scalars wait before reaching the file. Defaults to 10.
    """

    def __init__(self, dirname: str = "tensorboard", flush_secs: int = 10) -> None:
        super().__init__(flush_secs)
        self.dirname = dirname
        self.log_dir: str | None = None
        self._writer: Any = None

    def open(self, log_dir: str, resume_step: int | None = None) -> None:
        global _tb_warned
        from ._tb_events import EventFileWriter

        self.log_dir = os.path.join(log_dir, self.dirname)
        purge = None if resume_step is None else resume_step + 1
        self._flushed_at = time.monotonic()
        try:
            self._writer = EventFileWriter(self.log_dir, purge_step=purge)
        except ImportError:
            if not _tb_warned:
                _tb_warned = True
                _logger.warning(
                    "TensorBoard logging is off: the 'tensorboard' package is not installed "
                    "(pip install tensorboard). Scalars still go to scalars.jsonl."
                )

    def _accepts(self) -> bool:
        return self._writer is not None

    def _write_rows(self, rows: list[tuple[int, float, dict[str, float]]]) -> None:
        for step, wall_time, row in rows:
            self._writer.add_scalars(row, step, wall_time=wall_time)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self.flush()
            self._writer.close()
            self._writer = None


def default_backends() -> list[dict]:
    """JSON lines, and TensorBoard (which only warns, once, when the package is missing)."""
    return [dict(type="JsonlBackend"), dict(type="TensorboardBackend")]
