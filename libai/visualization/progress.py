"""A live progress bar on the shared console, drawn only when stdout is a terminal."""

from __future__ import annotations

from typing import Any

from libai.utils.logging import get_console, stdout_is_terminal

__all__ = ["ProgressBar"]


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
