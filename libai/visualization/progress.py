"""A live progress bar on the shared console, drawn only when stdout is a terminal, and the
heartbeat lines that stand in for it elsewhere."""

from __future__ import annotations

import datetime
import time
from typing import Any

from libai.utils.logging import get_console, stdout_is_terminal

__all__ = ["Heartbeat", "ProgressBar"]

_clock = time.monotonic  # the heartbeat's wall clock (tests replace it)


class ProgressBar:
    """Named tasks ('train', 'val') on one rich ``Progress``; inert when not on a terminal.

    ``advance`` costs about a microsecond (a lock and a counter), so the loops call it every
    iteration; drawing happens on rich's refresh thread, twice a second.

    Args:
        enabled: Draw at all (LoggerHook passes False on ranks > 0). Defaults to True.
    """

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled and stdout_is_terminal()
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}

    def add(self, key: str, description: str, total: int | None, completed: int = 0) -> None:
        """Show a task (replacing one with the same key)."""
        if not self.enabled:
            return
        if self._progress is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("elapsed"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=get_console(),
                refresh_per_second=2,
            )
            self._progress.start()
        self.remove(key)
        self._tasks[key] = self._progress.add_task(description, total=total, completed=completed)

    def advance(self, key: str, n: int = 1) -> None:
        task = self._tasks.get(key)
        if task is not None:
            self._progress.advance(task, n)

    def update(self, key: str, completed: int | None = None, total: int | None = None,
               description: str | None = None) -> None:
        """Set a task's position, total or text (what is given)."""
        task = self._tasks.get(key)
        if task is None:
            return
        fields: dict[str, Any] = {}
        if completed is not None:
            fields["completed"] = completed
        if total is not None:
            fields["total"] = total
        if description is not None:
            fields["description"] = description
        self._progress.update(task, **fields)

    def remove(self, key: str) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            self._progress.remove_task(task)

    def stop(self) -> None:
        """Remove every task and end the live display (safe to call twice)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self._tasks.clear()


class Heartbeat:
    """Short progress lines for a log without a bar: the caller logs one when :meth:`due` says
    ``every`` seconds passed since its last line of any kind (it calls :meth:`mark` for each).
    Reading the clock is the only cost per iteration; no collective.

    Args:
        every: Seconds between lines at most; None: never due.
    """

    def __init__(self, every: float | None) -> None:
        self.every = every
        self._last = self._t0 = self._t_eval = _clock()
        self._start_iter = 0
        self._stage, self._eval_total = "val", None

    def start(self, iteration: int) -> None:
        """Training starts (or resumes) at ``iteration``: its rate counts from here."""
        self._t0 = self._last = _clock()
        self._start_iter = iteration

    def start_eval(self, stage: str, total: int | None) -> None:
        self._t_eval, self._stage, self._eval_total = _clock(), stage, total

    def due(self) -> bool:
        return self.every is not None and _clock() - self._last >= self.every

    def mark(self) -> None:
        """A line was logged: the next heartbeat is due ``every`` seconds from now."""
        self._last = _clock()

    def train_line(self, head: str, done: int, total: int, interval: int) -> str:
        """``Iter [340/1000]  1.21 it/s  eta: 0:09:05  (heartbeat; losses every 50 ...)``."""
        parts = [head, *_rate_and_eta(done - self._start_iter, total - done,
                                      _clock() - self._t0, "it")]
        return "  ".join([*parts, f"(heartbeat; losses every {interval} iterations)"])

    def eval_line(self, done: int) -> str:
        """``Val batch [37/120]  3.1 batches/s  eta: 0:00:26  (heartbeat)``."""
        total = self._eval_total
        parts = [f"{self._stage.capitalize()} batch [{done}/{total or '?'}]",
                 *_rate_and_eta(done, None if total is None else total - done,
                                _clock() - self._t_eval, "batch")]
        return "  ".join([*parts, "(heartbeat)"])


def _rate_and_eta(done: int, left: int | None, elapsed: float, unit: str) -> list[str]:
    if done <= 0 or elapsed <= 0:
        return []
    rate = done / elapsed
    per_s = "it/s" if unit == "it" else "batches/s"
    parts = [f"{rate:.3g} {per_s}" if rate >= 1 else f"{1 / rate:.3g} s/{unit}"]
    if left is not None:
        parts.append(f"eta: {datetime.timedelta(seconds=int(max(left, 0) / rate))}")
    return parts
