"""ParamSchedulerHook: sets the optimizer's scheduled values (lr, momentum...) before each step."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from libai.registry import HOOKS

from .hook import Hook, RunnerView

__all__ = ["ParamSchedulerHook"]


def _resolve_apply() -> Callable[..., Any]:
    # Imported here, not at module level: libai.optim is a sibling layer that the hooks package
    # must not pull in when it is imported.
    from libai.optim import apply_schedulers

    return apply_schedulers


@HOOKS.register_module()
class ParamSchedulerHook(Hook):
    """Drive ``runner.param_schedulers`` from the iteration counter.

    Schedulers in libai are pure functions of the iteration: before iteration ``t`` (0-based,
    ``runner.iter``) this hook calls ``libai.optim.apply_schedulers(optimizer, schedulers, t)``,
    which writes every param group's scheduled values. Because nothing is accumulated, a resumed
    run gets the same values as an uninterrupted one. Epoch-based schedules are converted to
    iterations when they are built, so this hook has no per-epoch stage.

    After each validation during training, schedulers that react to metrics (those with a
    ``step_metrics(metrics)`` method, such as ReduceOnPlateauLR) receive all validation metrics.

    Priority HIGH: the values must be set before any other hook looks at them in
    ``before_train_iter`` and before the optimizer step.
    """

    priority = "HIGH"

    def __init__(self) -> None:
        self._apply: Callable[..., Any] | None = None
        self._training = False

    @staticmethod
    def _schedulers(runner: RunnerView) -> list[Any]:
        return list(runner.param_schedulers or [])

    def before_train(self, runner: RunnerView) -> None:
        self._training = True
        if self._schedulers(runner):
            self._apply = _resolve_apply()
        else:  # a constant schedule: nothing to do per iteration (the runner's schedulers
            self.disable_stage("before_train_iter")  # are built once, so for good)

    def after_train(self, runner: RunnerView) -> None:
        self._training = False

    def before_train_iter(self, runner: RunnerView, batch_idx: int, data_batch: Any = None) -> None:
        schedulers = runner.param_schedulers
        if not schedulers:
            return
        if self._apply is None:
            self._apply = _resolve_apply()
        self._apply(runner.optim_wrapper.optimizer, schedulers, runner.iter)

    def after_val(self, runner: RunnerView, metrics: Mapping[str, float] | None = None) -> None:
        if not self._training or not metrics:
            return
        for scheduler in self._schedulers(runner):
            step_metrics = getattr(scheduler, "step_metrics", None)
            if callable(step_metrics):
                step_metrics(metrics)
