"""RuntimeInfoHook: keeps the message hub's view of the run (iteration, epoch, metrics) current."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from libai.registry import HOOKS

from .hook import Hook, RunnerView

__all__ = ["RuntimeInfoHook"]


@HOOKS.register_module()
class RuntimeInfoHook(Hook):
    """Write the run's extent and the validation metrics into ``runner.message_hub``.

    ``message_hub.info`` gets ``epoch`` (0-based current epoch), ``max_iters`` and
    ``max_epochs``. The live iteration is ``runner.iter``; it is not copied per iteration. After each validation or test set, its metrics (for
    example ``val/accuracy``) are recorded as message-hub scalars at step ``runner.iter``, so
    that any hook can read the latest value with ``message_hub.latest(name)``.

    It runs first among the built-in hooks (priority VERY_HIGH) so that the others see fresh
    values. It does nothing per iteration.
    """

    priority = "VERY_HIGH"

    @staticmethod
    def _update_position(runner: RunnerView) -> None:
        runner.message_hub.update_info("epoch", runner.epoch)

    def before_run(self, runner: RunnerView) -> None:
        # not max_iters here: a test-only run has no train loop to ask
        self._update_position(runner)

    def before_train(self, runner: RunnerView) -> None:
        self._update_position(runner)  # after a resume
        runner.message_hub.update_info("max_iters", runner.max_iters)
        runner.message_hub.update_info("max_epochs", runner.max_epochs)

    def before_train_epoch(self, runner: RunnerView) -> None:
        runner.message_hub.update_info("epoch", runner.epoch)

    def after_train(self, runner: RunnerView) -> None:
        self._update_position(runner)

    def after_val_epoch(self, runner: RunnerView, metrics: Mapping[str, Any] | None = None) -> None:
        self._store(runner, metrics)

    def after_test_epoch(self, runner: RunnerView, metrics: Mapping[str, Any] | None = None) -> None:
        self._store(runner, metrics)

    @staticmethod
    def _store(runner: RunnerView, metrics: Mapping[str, Any] | None) -> None:
        for name, value in (metrics or {}).items():
            try:
                value = float(value)
            except (TypeError, ValueError):
                continue  # a non-scalar result (a confusion matrix...) is not a scalar to track
            runner.message_hub.update_scalar(name, value, step=runner.iter)
