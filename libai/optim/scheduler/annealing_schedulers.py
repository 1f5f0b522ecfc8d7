"""Annealing schedulers: cosine, polynomial and one-cycle.

Each takes the window options of :class:`ParamScheduler` as keyword arguments
(``param_name``, ``begin``, ``end``, ``by_epoch``); ``i`` below is ``t - begin`` and ``L`` the
window length. A floor given as an absolute value (``eta_min``) turns into a per-group factor
``eta_min / initial``; ``eta_min_ratio`` gives it as a factor directly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from libai.registry import PARAM_SCHEDULERS
from libai.utils.errors import ConfigError

from .param_scheduler import ParamScheduler

__all__ = ["CosineAnnealingLR", "PolyLR", "OneCycleLR"]


class _AnnealingScheduler(ParamScheduler):
    """``factor = floor + (1 - floor) * shape(i)`` with a floor from eta_min or eta_min_ratio."""

    def __init__(
        self, eta_min: float | None = None, eta_min_ratio: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if eta_min is not None and eta_min_ratio is not None:
            raise ConfigError(
                f"{type(self).__name__}: set eta_min (an absolute value) or eta_min_ratio (a "
                f"fraction of the initial value), not both (got {eta_min} and {eta_min_ratio})."
            )
        self.eta_min = None if eta_min is None else float(eta_min)
        self.eta_min_ratio = None if eta_min_ratio is None else float(eta_min_ratio)

    def _shape(self, i: int) -> float:
        raise NotImplementedError

    def _factor_at(self, i: int) -> float:
        floor = self.eta_min_ratio or 0.0
        return floor + (1.0 - floor) * self._shape(i)

    def multiplier(self, t: int, initial: float, group_index: int) -> float:
        """The factor, with ``eta_min`` turned into this group's ratio ``eta_min / initial``."""
        if self.eta_min is None:
            return self.factor(t)
        i = self._local(t)
        if i is None:
            return 1.0
        floor = self.eta_min / initial if initial else 0.0
        return floor + (1.0 - floor) * self._shape(i)


@PARAM_SCHEDULERS.register_module(name=["CosineAnnealingLR", "CosineAnnealingParamScheduler"])
class CosineAnnealingLR(_AnnealingScheduler):
    """Cosine from 1 down to the floor: ``shape = (1 + cos(pi * i / T_max)) / 2``.

    With the default ``T_max = L`` the last iteration of the window is just above the floor
    (no iteration is wasted at the minimum); a smaller ``T_max`` makes the curve periodic, as
    in torch's closed form.

    Args:
        T_max: Half period in iterations (epochs if ``by_epoch``). Defaults to the window length.
        eta_min: Absolute minimum value. Defaults to None (0 unless eta_min_ratio is set).
        eta_min_ratio: Minimum as a fraction of the initial value. Defaults to None.
        **kwargs: Window options of :class:`ParamScheduler`.
    """

    def __init__(
        self,
        T_max: float | None = None,
        eta_min: float | None = None,
        eta_min_ratio: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(eta_min=eta_min, eta_min_ratio=eta_min_ratio, **kwargs)
        if T_max is None:
            self.T_max = self._require_length("T_max")
        else:
            self.T_max = self._to_iters(T_max, "T_max")
        if self.T_max < 1:
            raise ConfigError(f"CosineAnnealingLR.T_max is {self.T_max} iterations; use >= 1.")

    def _shape(self, i: int) -> float:
        return (1.0 + math.cos(math.pi * i / self.T_max)) / 2.0


@PARAM_SCHEDULERS.register_module(name=["PolyLR", "PolyParamScheduler"])
class PolyLR(_AnnealingScheduler):
    """Polynomial decay to the floor: ``shape = (1 - i / L) ** power``.

    Args:
        power: Exponent of the decay. Defaults to 1.0.
        eta_min: Absolute minimum value. Defaults to 0.
        eta_min_ratio: Minimum as a fraction of the initial value. Defaults to None.
        **kwargs: Window options of :class:`ParamScheduler`.
    """

    def __init__(
        self,
        power: float = 1.0,
        eta_min: float | None = None,
        eta_min_ratio: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(eta_min=eta_min, eta_min_ratio=eta_min_ratio, **kwargs)
        self.power = float(power)
        self._total = self._require_length("the decay")

    def _shape(self, i: int) -> float:
        return (1.0 - i / self._total) ** self.power


_ANNEAL = ("cos", "linear")


@PARAM_SCHEDULERS.register_module(name=["OneCycleLR", "OneCycleParamScheduler"])
class OneCycleLR(ParamScheduler):
    """The 1cycle policy: up from ``peak / div_factor`` to the peak, then down to
    ``peak / (div_factor * final_div_factor)`` at ``end - 1``.

    The peak is ``eta_max`` if given (one value, or one per parameter group), else the group's
    initial value. The phase boundaries follow torch's ``OneCycleLR(total_steps=L)``.

    Args:
        eta_max: Peak value(s). Defaults to None (the group's initial value is the peak).
        pct_start: Fraction of the window spent rising. Defaults to 0.3.
        div_factor: Peak / starting value. Defaults to 25.
        final_div_factor: Starting value / final value. Defaults to 1e4.
        anneal_strategy: "cos" or "linear". Defaults to "cos".
        three_phase: Rise, fall back to the start, then anneal to the final value.
            Defaults to False.
        **kwargs: Window options of :class:`ParamScheduler`.
    """

    def __init__(
        self,
        eta_max: float | Sequence[float] | None = None,
        pct_start: float = 0.3,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        anneal_strategy: str = "cos",
        three_phase: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._check_choice("anneal_strategy", anneal_strategy, _ANNEAL)
        if not 0 < pct_start < 1:
            raise ConfigError(f"OneCycleLR.pct_start must be in (0, 1), got {pct_start!r}.")
        self.eta_max = list(eta_max) if isinstance(eta_max, Sequence) else eta_max
        self.pct_start = float(pct_start)
        self.div_factor = float(div_factor)
        self.final_div_factor = float(final_div_factor)
        self.anneal_strategy = anneal_strategy
        self.three_phase = bool(three_phase)
        total = self._require_length("the cycle")
        start = 1.0 / self.div_factor
        final = start / self.final_div_factor
        rise_end = self.pct_start * total - 1
        if self.three_phase:
            self._phases = [
                (rise_end, start, 1.0),
                (2 * rise_end, 1.0, start),
                (total - 1, start, final),
            ]
        else:
            self._phases = [(rise_end, start, 1.0), (total - 1, 1.0, final)]

    def _anneal(self, a: float, b: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return b + (a - b) * (1.0 + math.cos(math.pi * pct)) / 2.0
        return a + (b - a) * pct

    def _factor_at(self, i: int) -> float:
        phase_start = 0.0
        for k, (phase_end, a, b) in enumerate(self._phases):
            if i <= phase_end or k == len(self._phases) - 1:
                span = phase_end - phase_start
                pct = 1.0 if span <= 0 else (i - phase_start) / span
                return self._anneal(a, b, pct)
            phase_start = phase_end
        raise AssertionError("unreachable: the last phase always matches")

    def _peak(self, group_index: int) -> float | None:
        if isinstance(self.eta_max, list):
            return self.eta_max[group_index]
        return self.eta_max

    def multiplier(self, t: int, initial: float, group_index: int) -> float:
        """The shape times ``eta_max / initial`` for this group when ``eta_max`` is given."""
        peak = self._peak(group_index)
        if peak is None or self._local(t) is None:
            return self.factor(t)
        if not initial:
            raise ConfigError(
                f"OneCycleLR with eta_max needs a non-zero initial {self.param_name} in group "
                f"{group_index} to scale."
            )
        return self.factor(t) * peak / initial

    def check(self, param_groups: Sequence[Mapping[str, Any]]) -> None:
        """Also check that a list ``eta_max`` has one value per group."""
        super().check(param_groups)
        if isinstance(self.eta_max, list) and len(self.eta_max) != len(param_groups):
            raise ConfigError(
                f"OneCycleLR.eta_max has {len(self.eta_max)} values but the optimizer has "
                f"{len(param_groups)} parameter groups; give one value or one per group."
            )
