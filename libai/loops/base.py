"""What every loop shares: a runner, a data loader, and the ``run()`` entry point."""

from __future__ import annotations

from typing import Any

__all__ = ["BaseLoop"]


class BaseLoop:
    """A loop drives the work; hooks do the side work. Subclass and override ``run``.

    Args:
        runner: The runner that owns this loop; the loop calls ``runner.call_hook``.
        dataloader: The data loader the loop iterates.
    """

    def __init__(self, runner: Any, dataloader: Any) -> None:
        self.runner = runner
        self.dataloader = dataloader

    def run(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement run()")
