"""Piecewise schedulers: linear ramp, constant, exponential, step and multi-step decay.

Each takes the window options of :class:`ParamScheduler` as keyword arguments
(``param_name``, ``begin``, ``end``, ``by_epoch``); ``i`` below is ``t - begin``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from libai.registry import PARAM_SCHEDULERS
from libai.utils.errors import ConfigError

from .param_scheduler import ParamScheduler

__all__ = ["LinearLR", "ConstantLR", "ExponentialLR", "StepLR", "MultiStepLR"]


def _positive(owner: object, name: str, value: Any, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{type(owner).__name__}.{name} must be a number {bound}, got {value!r}.")
    return float(value)


@PARAM_SCHEDULERS.register_module(name=["LinearLR", "LinearParamScheduler"])
class LinearLR(ParamScheduler):
    """Linear ramp from ``start_factor`` at ``begin`` to ``end_factor`` at ``end - 1``.

    ``factor = start + (end_factor - start) * i / (length - 1)``; it reaches ``end_factor``
    inside the window so that a warmup ends exactly at the full value, which then stays.
    torch's ``LinearLR(total_iters=n)`` is this with ``end = begin + n + 1``.

    Args:
        start_factor: Factor at ``begin``. Defaults to 1/3.
        end_factor: Factor at ``end - 1`` and after. Defaults to 1.0.
        **kwargs: Window options of :class:`ParamScheduler`.
    """

    def __init__(self, start_factor: float = 1.0 / 3, end_factor: float = 1.0, **kwargs: Any):
        super().__init__(**kwargs)
        self.start_factor = _positive(self, "start_factor", start_factor, allow_zero=True)
        self.end_factor = _positive(self, "end_factor", end_factor, allow_zero=True)
        self._steps = self._require_length("the slope") - 1

    def _factor_at(self, i: int) -> float:
        progress = 1.0 if self._steps <= 0 else i / self._steps
        return self.start_factor + (self.end_factor - self.start_factor) * progress


@PARAM_SCHEDULERS.register_module(name=["ConstantLR", "ConstantParamScheduler"])
class ConstantLR(ParamScheduler):
    """``factor`` inside the window, 1.0 outside it (before ``begin`` and from ``end`` on).

    This is the one scheduler whose value does not stay after ``end``: holding a constant
    forever would just be a different base value.

    Args:
        factor: Multiplier inside the window. Defaults to 1/3.
        **kwargs: Window options of :class:`ParamScheduler`.
    """

    def __init__(self, factor: float = 1.0 / 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.constant_factor = _positive(self, "factor", factor, allow_zero=True)

    def factor(self, t: int) -> float:
        """``constant_factor`` if ``begin <= t < end``, else 1.0."""
        if t < self.begin or (self.end is not None and t >= self.end):
            return 1.0
        return self.constant_factor

    def _factor_at(self, i: int) -> float:
        return self.constant_factor


@PARAM_SCHEDULERS.register_module(name=["ExponentialLR", "ExponentialParamScheduler"])
class ExponentialLR(ParamScheduler):
    """``factor = gamma ** i``.

    Args:
        gamma: Multiplicative decay per iteration. Defaults to 0.99.
        **kwargs: Window options of :class:`ParamScheduler`.
    """

    def __init__(self, gamma: float = 0.99, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.gamma = _positive(self, "gamma", gamma)

    def _factor_at(self, i: int) -> float:
        return self.gamma**i


@PARAM_SCHEDULERS.register_module(name=["StepLR", "StepParamScheduler"])
class StepLR(ParamScheduler):
    """``factor = gamma ** (i // step_size)``.

    Args:
        step_size: Period of the decay, in iterations (epochs if ``by_epoch``).
        gamma: Multiplier applied every period. Defaults to 0.1.
        **kwargs: Window options of :class:`ParamScheduler`.
    """

    def __init__(self, step_size: float, gamma: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step_size = self._to_iters(step_size, "step_size")
        if self.step_size < 1:
            raise ConfigError(
                f"StepLR.step_size is {self.step_size} iterations; it must be at least 1."
            )
        self.gamma = _positive(self, "gamma", gamma, allow_zero=True)

    def _factor_at(self, i: int) -> float:
        return self.gamma ** (i // self.step_size)


@PARAM_SCHEDULERS.register_module(name=["MultiStepLR", "MultiStepParamScheduler"])
class MultiStepLR(ParamScheduler):
    """``factor = gamma ** (number of milestones <= t)``.

    Milestones are global iterations (epochs if ``by_epoch``), not offsets from ``begin``.

    Args:
        milestones: Iterations (or epochs) where the value is multiplied by ``gamma``.
        gamma: Multiplier applied at each milestone. Defaults to 0.1.
        **kwargs: Window options of :class:`ParamScheduler`.
    """

    def __init__(self, milestones: Sequence[float], gamma: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(milestones, (str, bytes)) or not isinstance(milestones, Sequence):
            raise ConfigError(
                f"MultiStepLR.milestones must be a list of iterations (or epochs), got "
                f"{milestones!r}."
            )
        self.milestones = sorted(self._to_iters(m, "milestones") for m in milestones)
        self.gamma = _positive(self, "gamma", gamma, allow_zero=True)

    def _factor_at(self, i: int) -> float:
        return self.gamma ** bisect.bisect_right(self.milestones, i + self.begin)
