"""The parameter scheduler contract: a pure function of the training iteration.

A scheduler says, for every global iteration ``t``, by how much to multiply the initial value of
one optimizer field (``param_name``: "lr", "momentum", "weight_decay" or any numeric group
option)::

    value(t) = initial_value * product of factor(t) over the schedulers of that field

``factor(t)`` is 1.0 before ``begin`` and, from ``end`` on, stays at ``factor(end - 1)``.

Positions (``begin``, ``end``) and durations may be written relative to the run, so that a run
shortened or lengthened with ``--cfg-options train_cfg.max_iters=N`` keeps the shape of its
schedule: a float in (0, 1] is that fraction of the run (``end=0.05``: the first 5%, at least one
iteration), ``dict(iters=100, at_most=0.1)`` is 100 iterations but at most 10% of the run (a
warm-up), and ``end=None`` or ``-1`` is the end of training. A window that the run ends before
(``begin`` at or after ``max_iters``) is a one-line ConfigError naming both numbers and the key,
unless it was written relative to the run: then it only never applies in a very short run.
Schedulers hold no step counter, so resuming at iteration ``t`` is just ``apply(t)``. The
initial value is read from the group the first time it is scheduled and kept in the group as
``initial_<param_name>``, so it is saved with the optimizer state. ``param_name="momentum"``
means ``betas[0]`` for Adam-like optimizers.

The ParamSchedulerHook calls :func:`apply_schedulers` before every training iteration.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from libai.registry import PARAM_SCHEDULERS
from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

from .._build import build_unwrapped

__all__ = [
    "ParamScheduler",
    "ScheduleFitError",
    "apply_schedulers",
    "build_param_schedulers",
    "fraction_of_run",
    "is_relative",
]


class ParamScheduler:
    """Base class: subclasses implement :meth:`_factor_at`, a function of ``t - begin``.

    Args:
        param_name: The optimizer group field to schedule. Defaults to "lr".
        begin: First iteration (or epoch, if ``by_epoch``) of the window, or a position
            relative to the run (see the module docstring). Defaults to 0.
        end: Iteration (or epoch) where the window ends, exclusive, or a relative position.
            Defaults to None (or -1): ``max_iters``, the end of training (unbounded if that is
            unknown too).
        by_epoch: Whether ``begin``, ``end`` and the scheduler's other durations are in epochs;
            they are converted to iterations with ``epoch_length``, and the value then changes
            every iteration. Defaults to False.
        max_iters: Total training iterations, given by the builder. Defaults to None.
        epoch_length: Iterations per epoch, given by the builder; needed if ``by_epoch``.
            Defaults to None.
        **unknown: Any other keyword is a typo: rejected with a did-you-mean ConfigError.

    Raises:
        ConfigError: a bad window, an unknown argument, or ``by_epoch`` without
            ``epoch_length``.
    """

    def __init__(
        self,
        param_name: str = "lr",
        begin: float = 0,
        end: float | None = None,
        by_epoch: bool = False,
        max_iters: int | None = None,
        epoch_length: int | None = None,
        **unknown: Any,
    ) -> None:
        if unknown:
            self._reject(next(iter(unknown)))
        if by_epoch and not epoch_length:
            raise ConfigError(
                f"{type(self).__name__}(by_epoch=True) needs the number of iterations per epoch "
                f"to convert epochs to iterations; build it with build_param_schedulers(..., "
                f"epoch_length=len(train_dataloader)) or pass epoch_length."
            )
        self.param_name = param_name
        self.by_epoch = bool(by_epoch)
        self._epoch_length = epoch_length
        self._max_iters = max_iters
        self.begin = self._to_iters(begin, "begin")
        to_end = end is None or (end == -1 and not isinstance(end, bool))
        self.end = max_iters if to_end else self._to_iters(end, "end")
        if max_iters is not None and self.begin >= max_iters:
            if not is_relative(begin):
                raise ScheduleFitError(type(self).__name__, "begin", self.begin, max_iters)
            self.end = self.begin + 1  # a relative window in a very short run: never applies
        if self.end is not None and self.end <= self.begin:
            raise ConfigError(
                f"{type(self).__name__}: the window [begin, end) is empty (begin={self.begin}, "
                f"end={self.end} iterations); end must be greater than begin."
            )

    def _check_choice(self, name: str, value: Any, options: Sequence[str]) -> None:
        """Refuse a setting that is not one of ``options``, with a did-you-mean."""
        if value not in options:
            raise ConfigError(
                f"{type(self).__name__}.{name}={value!r} is unknown."
                f"{did_you_mean(str(value), options)} Use one of: {', '.join(options)}."
            )

    def _reject(self, key: str) -> None:
        valid = [
            n
            for cls in (type(self), ParamScheduler)
            for n, p in inspect.signature(cls.__init__).parameters.items()
            if n != "self" and p.kind is not p.VAR_KEYWORD
        ]
        raise ConfigError(
            f"{type(self).__name__} got an unexpected argument {key!r}.{did_you_mean(key, valid)} "
            f"Valid arguments: {', '.join(dict.fromkeys(valid))}."
        )

    def _to_iters(self, value: Any, name: str) -> int:
        """Convert a duration or position given in the scheduler's unit, or relative to the
        run (a fraction, or ``dict(iters=, at_most=)``), to iterations."""
        if is_relative(value):
            return self._relative(value, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                0 <= value < math.inf):
            raise ConfigError(
                f"{type(self).__name__}.{name} must be a number >= 0, a fraction of the run in "
                f"(0, 1] or dict(iters=N, at_most=fraction), got {value!r}.")
        if self.by_epoch:
            return int(round(value * self._epoch_length))
        if value != int(value):
            raise ConfigError(
                f"{type(self).__name__}.{name}={value!r} is a fraction of an iteration; use an "
                f"integer, a fraction of the run in (0, 1], or by_epoch=True to give it in "
                f"epochs."
            )
        return int(value)

    def _relative(self, value: Any, name: str) -> int:
        """Iterations of a position relative to the run (see the module docstring)."""
        if self._max_iters is None:
            raise ConfigError(
                f"{type(self).__name__}.{name}={value!r} is relative to the run's length, which "
                f"is unknown here: build it with build_param_schedulers(..., max_iters=...).")
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - {"iters", "at_most"})
            if unknown or "iters" not in value:
                bad = unknown[0] if unknown else "iters"
                raise ConfigError(
                    f"{type(self).__name__}.{name}={dict(value)!r}: expected dict(iters=N, "
                    f"at_most=fraction), N iterations but at most that fraction of the run."
                    f"{did_you_mean(bad, ['iters', 'at_most']) if unknown else ''}")
            try:
                cap = fraction_of_run(value.get("at_most", 1.0), self._max_iters)
            except ConfigError as e:  # say which key
                raise ConfigError(f"{type(self).__name__}.{name}.at_most: {e}") from None
            return min(self._to_iters(value["iters"], f"{name}.iters"), cap)
        return fraction_of_run(value, self._max_iters)

    @property
    def length(self) -> int | None:
        """Number of iterations in the window (None if unbounded)."""
        return None if self.end is None else self.end - self.begin

    def _require_length(self, what: str) -> int:
        if self.end is None:
            raise ConfigError(
                f"{type(self).__name__} needs a bounded window to compute {what}: set 'end', or "
                f"build it with build_param_schedulers(..., max_iters=...)."
            )
        return self.end - self.begin

    def _local(self, t: int) -> int | None:
        """``t - begin`` with ``t`` clipped to ``end - 1``; None before ``begin``."""
        if t < self.begin:
            return None
        if self.end is not None and t >= self.end:
            t = self.end - 1
        return t - self.begin

    def factor(self, t: int) -> float:
        """Multiplier of the initial value at global iteration ``t``."""
        i = self._local(t)
        return 1.0 if i is None else self._factor_at(i)

    def _factor_at(self, i: int) -> float:
        """The factor ``i`` iterations after ``begin`` (``0 <= i < length``)."""
        raise NotImplementedError

    def multiplier(self, t: int, initial: float, group_index: int) -> float:
        """The factor for one group; schedulers with absolute values (eta_min) override it.

        Args:
            t: Global iteration.
            initial: The group's initial value of ``param_name``.
            group_index: Index of the group in the optimizer.
        """
        return self.factor(t)

    def check(self, param_groups: Sequence[Mapping[str, Any]]) -> None:
        """Validate against the optimizer at build time.

        Raises:
            ConfigError: a group lacks ``param_name``.
        """
        for group in param_groups:
            _get_value(group, self.param_name, self)

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's configuration: it is a pure function, so that is all its state."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Nothing to restore for a pure scheduler: the config builds the same function."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.state_dict().items())
        return f"{type(self).__name__}({args})"


class ScheduleFitError(ConfigError):
    """A window that begins at or after the end of training. :func:`build_param_schedulers`
    words it with the scheduler's config key (``param_scheduler.1.begin``)."""

    def __init__(self, name: str, field: str, value: int, max_iters: int, key: str = "") -> None:
        self.args_ = (name, field, value, max_iters)
        where = key or f"{name}.{field}"
        super().__init__(
            f"{where}={value} iterations but training ends at {max_iters} (train_cfg.max_iters): "
            f"{name} would never apply. Lower {where}, or write it relative to the run "
            f"(a fraction such as 0.05, or dict(iters={value}, at_most=0.1)).")


def is_relative(value: Any) -> bool:
    """Whether a position is written relative to the run: a float in (0, 1] or a dict."""
    if isinstance(value, Mapping):
        return True
    return isinstance(value, float) and 0 < value <= 1


def fraction_of_run(fraction: Any, max_iters: int) -> int:
    """``fraction`` of ``max_iters`` iterations, rounded, and at least 1."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not (
            0 < fraction <= 1):
        raise ConfigError(f"A fraction of the run must be a number in (0, 1], got {fraction!r}.")
    return max(1, round(fraction * max_iters))


# ---------------------------------------------------------------------------- group fields
def _uses_betas(group: Mapping[str, Any], name: str) -> bool:
    return name == "momentum" and "momentum" not in group and "betas" in group


def _get_value(group: Mapping[str, Any], name: str, scheduler: Any) -> float:
    if _uses_betas(group, name):
        return float(group["betas"][0])
    if name not in group:
        options = [k for k in group if k != "params" and not k.startswith("initial_")]
        raise ConfigError(
            f"{type(scheduler).__name__}: param_name={name!r} is not an option of the "
            f"optimizer's parameter groups.{did_you_mean(name, options)} Group options: "
            f"{', '.join(options)}."
        )
    value = group[name]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(
            f"{type(scheduler).__name__}: param_name={name!r} holds {value!r}, not a number; "
            f"only numeric group options can be scheduled."
        )
    return float(value)


def _set_value(group: dict[str, Any], name: str, value: float) -> None:
    if _uses_betas(group, name):
        group["betas"] = (value, *tuple(group["betas"])[1:])
    elif isinstance(group[name], torch.Tensor):
        group[name].fill_(value)  # tensor lr (capturable optimizers): keep the same tensor
    else:
        group[name] = value


def apply_schedulers(optimizer: Any, schedulers: Sequence[ParamScheduler], t: int) -> None:
    """Set every scheduled field of every parameter group to its value at iteration ``t``.

    Args:
        optimizer: A torch optimizer or an optim wrapper (anything with ``param_groups``).
        schedulers: The schedulers; those of the same ``param_name`` multiply.
        t: Global iteration about to be trained (0-based).
    """
    by_name: dict[str, list[ParamScheduler]] = {}
    for s in schedulers:
        by_name.setdefault(s.param_name, []).append(s)
    for name, group_schedulers in by_name.items():
        key = f"initial_{name}"
        for index, group in enumerate(optimizer.param_groups):
            if key not in group:
                group[key] = _get_value(group, name, group_schedulers[0])
            initial = group[key]
            value = initial
            for s in group_schedulers:
                value *= s.multiplier(t, initial, index)
            _set_value(group, name, value)


def build_param_schedulers(
    cfg_list: Mapping | Sequence[Mapping | ParamScheduler] | None,
    optimizer: Any,
    max_iters: int | None = None,
    epoch_length: int | None = None,
) -> list[ParamScheduler]:
    """Build schedulers from config dicts and check them against the optimizer.

    Args:
        cfg_list: One config dict, a list of them (built schedulers pass through), or None.
        optimizer: A torch optimizer or an optim wrapper.
        max_iters: Total training iterations; the default ``end``. Defaults to None.
        epoch_length: Iterations per epoch, for ``by_epoch=True``. Defaults to None.

    Returns:
        The schedulers, in config order.
    """
    if cfg_list is None:
        return []
    if isinstance(cfg_list, Mapping):
        cfg_list = [cfg_list]
    defaults = {"max_iters": max_iters, "epoch_length": epoch_length}
    schedulers = []
    for i, cfg in enumerate(cfg_list):
        if isinstance(cfg, ParamScheduler):
            scheduler = cfg
        else:
            try:
                scheduler = build_unwrapped(PARAM_SCHEDULERS, cfg, defaults, f"param_scheduler[{i}]")
            except ScheduleFitError as e:  # say which key to change
                raise ScheduleFitError(*e.args_, key=f"param_scheduler.{i}.{e.args_[1]}") from None
        scheduler.check(optimizer.param_groups)
        schedulers.append(scheduler)
    return schedulers
