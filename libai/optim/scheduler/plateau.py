"""ReduceOnPlateauLR: the one stateful scheduler, driven by validation metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from libai.registry import PARAM_SCHEDULERS
from libai.utils.errors import CheckpointError, ConfigError
from libai.utils.suggest import did_you_mean

from .param_scheduler import ParamScheduler

__all__ = ["ReduceOnPlateauLR"]

_RULES = ("less", "greater")
_THRESHOLD_MODES = ("rel", "abs")
_STATE_KEYS = ("current_factor", "best", "num_bad", "cooldown_counter")


@PARAM_SCHEDULERS.register_module(name=["ReduceOnPlateauLR", "ReduceOnPlateauParamScheduler"])
class ReduceOnPlateauLR(ParamScheduler):
    """Multiply the value by ``factor`` when ``monitor`` stops improving.

    The ParamSchedulerHook passes each validation result to :meth:`step_metrics`; after more
    than ``patience`` evaluations without improvement the factor shrinks, then ``cooldown``
    evaluations are ignored. Between evaluations :meth:`factor` is the current factor inside
    the window (1.0 before ``begin``). Its state (the factor, the best value, the counters) is
    saved by :meth:`state_dict`.

    Args:
        monitor: Key of the metric in the validation results. Defaults to "loss".
        rule: "less" (lower is better) or "greater". Defaults to "less".
        factor: Multiplier applied on a plateau, in (0, 1). Defaults to 0.1.
        patience: Evaluations without improvement tolerated. Defaults to 10.
        threshold: Smallest change that counts as an improvement. Defaults to 1e-4.
        threshold_mode: "rel" (relative to the best value) or "abs". Defaults to "rel".
        cooldown: Evaluations to wait after a reduction. Defaults to 0.
        min_value: Floor of the scheduled value (absolute, per group). Defaults to 0.
        **kwargs: Window options of :class:`ParamScheduler`.
    """

    def __init__(
        self,
        monitor: str = "loss",
        rule: str = "less",
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",
        cooldown: int = 0,
        min_value: float = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._check_choice("rule", rule, _RULES)
        self._check_choice("threshold_mode", threshold_mode, _THRESHOLD_MODES)
        if not 0 < factor < 1:
            raise ConfigError(f"ReduceOnPlateauLR.factor must be in (0, 1), got {factor!r}.")
        self.monitor = monitor
        self.rule = rule
        self.reduce_factor = float(factor)
        self.patience = int(patience)
        self.threshold = float(threshold)
        self.threshold_mode = threshold_mode
        self.cooldown = int(cooldown)
        self.min_value = float(min_value)
        self._current_factor = 1.0
        self._best: float | None = None
        self._num_bad = 0
        self._cooldown_counter = 0

    def _factor_at(self, i: int) -> float:
        return self._current_factor

    def multiplier(self, t: int, initial: float, group_index: int) -> float:
        """The current factor, raised where needed so the value stays >= ``min_value``."""
        f = self.factor(t)
        if initial > 0 and f * initial < self.min_value:
            return min(1.0, self.min_value / initial)
        return f

    def _improved(self, value: float) -> bool:
        if self._best is None:
            return True
        sign = 1.0 if self.rule == "greater" else -1.0
        margin = (
            self.threshold * abs(self._best) if self.threshold_mode == "rel" else self.threshold
        )
        return sign * (value - self._best) > margin

    def step_metrics(self, metrics: Mapping[str, Any], iteration: int | None = None) -> None:
        """Update with one evaluation's results.

        Args:
            metrics: The validation metrics; must contain ``monitor``.
            iteration: The current global iteration; an evaluation outside the window is
                ignored. Defaults to None (always counted).

        Raises:
            ConfigError: ``monitor`` is not among the metric keys.
        """
        if self.monitor not in metrics:
            keys = [str(k) for k in metrics]
            raise ConfigError(
                f"ReduceOnPlateauLR.monitor={self.monitor!r} is not in the validation metrics."
                f"{did_you_mean(self.monitor, keys)} Metrics available: "
                f"{', '.join(keys) or 'none'}."
            )
        if iteration is not None and (
            iteration < self.begin or (self.end is not None and iteration >= self.end)
        ):
            return
        value = float(metrics[self.monitor])
        if self._improved(value):
            self._best = value
            self._num_bad = 0
        else:
            self._num_bad += 1
        if self._cooldown_counter > 0:
            self._cooldown_counter -= 1
            self._num_bad = 0
        if self._num_bad > self.patience:
            self._current_factor *= self.reduce_factor
            self._cooldown_counter = self.cooldown
            self._num_bad = 0

    @property
    def current_factor(self) -> float:
        """The factor reached so far (before the ``min_value`` floor)."""
        return self._current_factor

    def state_dict(self) -> dict[str, Any]:
        """The configuration plus the factor, the best value and the counters."""
        state = super().state_dict()
        state.update(
            current_factor=self._current_factor,
            best=self._best,
            num_bad=self._num_bad,
            cooldown_counter=self._cooldown_counter,
        )
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore the factor, the best value and the counters (the config comes from cfg)."""
        missing = [k for k in _STATE_KEYS if k not in state_dict]
        if missing:
            raise CheckpointError(
                f"ReduceOnPlateauLR.load_state_dict: the state lacks {', '.join(missing)}; it "
                f"was not saved by a ReduceOnPlateauLR."
            )
        self._current_factor = float(state_dict["current_factor"])
        best = state_dict["best"]
        self._best = None if best is None else float(best)
        self._num_bad = int(state_dict["num_bad"])
        self._cooldown_counter = int(state_dict["cooldown_counter"])
