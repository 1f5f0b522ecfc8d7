"""EarlyStoppingHook: ends training when a validation metric stops improving."""

from __future__ import annotations

import math
from collections.abc import Mapping

from libai.registry import HOOKS
from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

from ._metrics import check_rule, improved, infer_rule, lookup_metric
from .hook import Hook, RunnerView

__all__ = ["EarlyStoppingHook"]


@HOOKS.register_module()
class EarlyStoppingHook(Hook):
    """Set ``runner.should_stop`` when the monitored metric has not improved for a while.

    The check runs after every validation during training (``after_val``, which sees the metrics
    of all validation sets). Training then ends after the current iteration or epoch; the
    reason is logged. Three reasons stop training:

    - no improvement of more than ``min_delta`` in ``patience`` validations in a row;
    - the metric reached ``stopping_threshold``;
    - the metric is NaN or infinite (with ``check_finite``).

    Args:
        monitor: The metric to watch, with its prefix (``'val/accuracy'``, ``'val/loss'``).
        rule: ``'greater'`` or ``'less'``: which direction is better. Defaults to None: inferred
            from the name (loss, error, perplexity ... are less-is-better; accuracy, f1, map ...
            greater-is-better), a ConfigError when it cannot be.
        patience: Validations without improvement before stopping. Defaults to 5.
        min_delta: Smallest change that counts as an improvement (absolute, >= 0). Defaults to 0.0.
        stopping_threshold: Stop as soon as the metric is at least this good. Defaults to None.
        check_finite: Stop when the metric is NaN or infinite. Defaults to True.
        strict: Raise a ConfigError when ``monitor`` is missing from the metrics; otherwise warn
            once and skip the check. Defaults to False.

    State kept in checkpoints: the best score and the count of validations without improvement.
    """

    priority = "LOW"

    def __init__(
        self,
        monitor: str,
        rule: str | None = None,
        patience: int = 5,
        min_delta: float = 0.0,
        stopping_threshold: float | None = None,
        check_finite: bool = True,
        strict: bool = False,
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise ConfigError(f"EarlyStoppingHook: monitor must be a metric name, got {monitor!r}.")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ConfigError(f"EarlyStoppingHook: patience must be an int >= 1, got {patience!r}.")
        if min_delta < 0:
            raise ConfigError(
                f"EarlyStoppingHook: min_delta must be >= 0 (it is an absolute margin in the "
                f"direction of the rule), got {min_delta!r}."
            )
        self.monitor = monitor
        self.rule = check_rule(rule, "EarlyStoppingHook") or infer_rule(
            monitor, "EarlyStoppingHook(monitor=...)"
        )
        self.patience = patience
        self.min_delta = float(min_delta)
        self.stopping_threshold = stopping_threshold
        self.check_finite = check_finite
        self.strict = strict
        self.best_score: float | None = None
        self.wait_count = 0
        self._training = False
        self._warned_missing = False

    def monitored_metrics(self) -> list[str]:
        """The metric this hook must find (strict=True): the runner looks it up before training."""
        return [self.monitor] if self.strict else []

    def before_train(self, runner: RunnerView) -> None:
        self._training = True

    def after_train(self, runner: RunnerView) -> None:
        self._training = False

    def after_val(self, runner: RunnerView, metrics: Mapping[str, float] | None = None) -> None:
        if not self._training:
            return
        metrics = dict(metrics or {})
        if self.monitor not in metrics:
            self._missing(runner, metrics)
            return
        score = lookup_metric(metrics, self.monitor, "EarlyStoppingHook")
        reason = self._check(score)
        if reason is not None:
            runner.should_stop = True
            runner.logger.warning(f"Early stopping at iteration {runner.iter}: {reason}")

    def _check(self, score: float) -> str | None:
        """Update the state with a new score; returns why to stop, or None to go on."""
        name = self.monitor
        if self.check_finite and not math.isfinite(score):
            return f"{name} is {score}; training has diverged."
        threshold = self.stopping_threshold
        if threshold is not None and (
            score >= threshold if self.rule == "greater" else score <= threshold
        ):
            return f"{name} = {score:.6g} reached stopping_threshold {threshold}."
        if improved(score, self.best_score, self.rule, self.min_delta):
            self.best_score = score
            self.wait_count = 0
            return None
        self.wait_count += 1
        if self.wait_count >= self.patience:
            return (
                f"{name} has not improved by more than {self.min_delta} for {self.wait_count} "
                f"validation(s) in a row (best {self.best_score:.6g}, last {score:.6g}, "
                f"patience {self.patience})."
            )
        return None

    def _missing(self, runner: RunnerView, metrics: dict[str, float]) -> None:
        if self.strict:
            lookup_metric(metrics, self.monitor, "EarlyStoppingHook(strict=True)")  # raises
        if not self._warned_missing:
            self._warned_missing = True
            runner.logger.warning(
                f"EarlyStoppingHook: metric '{self.monitor}' is not among the validation "
                f"metrics ({', '.join(sorted(metrics)) or 'none'}), so early stopping is "
                f"inactive.{did_you_mean(self.monitor, list(metrics))}"
            )

    def state_dict(self) -> dict:
        return {"best_score": self.best_score, "wait_count": self.wait_count}

    def load_state_dict(self, state: dict) -> None:
        self.best_score = state.get("best_score")
        self.wait_count = int(state.get("wait_count", 0))
