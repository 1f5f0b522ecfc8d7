"""The Hook base class: side work at named points of the loops.

The runner calls hooks like this (``runner.call_hook(stage, **kwargs)`` calls every hook's method
of that name, in priority order)::

    before_run
    train():                                     # Runner.train
        before_train
        for epoch:                               # an epoch loop; the iter loop has one pass
            before_train_epoch
            for batch_idx, data_batch in loader:
                before_train_iter(batch_idx, data_batch)
                outputs = train_step(...)        # the optim wrapper calls, between its
                    after_backward               #   backward and its step, this stage
                after_train_iter(batch_idx, data_batch, outputs)
                [val()]                          # when the loop's val_interval says so
            after_train_epoch
            [val()]
        after_train
    val():                                       # ValLoop.run, same for test with "test"
        before_val
        for each validation set:
            before_val_epoch
            for batch_idx, data_batch in loader:
                before_val_iter(batch_idx, data_batch)
                outputs = val_step(...)
                after_val_iter(batch_idx, data_batch, outputs)
            after_val_epoch(metrics)            # metrics of that set, prefixed
        after_val(metrics)                       # all sets' metrics together
    before_save_checkpoint(checkpoint)           # may add entries to the checkpoint dict
    after_load_checkpoint(checkpoint)            # may read them back
    after_run

Cost rule: ``before_*_iter`` and ``after_*_iter`` run on every iteration: they must be cheap
(no device sync, no collective, no I/O) except on the iterations where they do their periodic
work. A hook that keeps state across a resume overrides ``state_dict``/``load_state_dict``; the
runner stores it in checkpoints under the hook's ``state_key``.

Defining a method that starts like a stage but is not one (``after_train_iters``) is an error when
the class is defined: such a method would silently never be called.
"""

from __future__ import annotations

import types
from typing import Any

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["Hook", "STAGES", "PRIORITIES", "get_priority"]

STAGES = (
    "before_run",
    "before_train",
    "before_train_epoch",
    "before_train_iter",
    "after_backward",
    "after_train_iter",
    "after_train_epoch",
    "before_val",
    "before_val_epoch",
    "before_val_iter",
    "after_val_iter",
    "after_val_epoch",
    "after_val",
    "after_train",
    "before_test",
    "before_test_epoch",
    "before_test_iter",
    "after_test_iter",
    "after_test_epoch",
    "after_test",
    "before_save_checkpoint",
    "after_load_checkpoint",
    "after_run",
)

PRIORITIES = {
    "HIGHEST": 0,
    "VERY_HIGH": 10,
    "HIGH": 30,
    "ABOVE_NORMAL": 40,
    "NORMAL": 50,
    "BELOW_NORMAL": 60,
    "LOW": 70,
    "VERY_LOW": 90,
    "LOWEST": 100,
}

_STAGE_PREFIXES = ("before_", "after_")


def get_priority(priority: int | str) -> int:
    """Turn a named level ('NORMAL') or an int (0 = first, 100 = last) into an int."""
    if isinstance(priority, bool):
        raise ConfigError(f"Hook priority must be an int or a level name, got {priority!r}")
    if isinstance(priority, int):
        if not 0 <= priority <= 100:
            raise ConfigError(f"Hook priority {priority} is outside 0..100 (0 runs first).")
        return priority
    if isinstance(priority, str) and priority.upper() in PRIORITIES:
        return PRIORITIES[priority.upper()]
    raise ConfigError(
        f"Unknown hook priority {priority!r}.{did_you_mean(str(priority).upper(), PRIORITIES)} "
        f"Levels: {', '.join(PRIORITIES)}; or an int in 0..100."
    )


class Hook:
    """Base class of hooks. Override the stages you need; see the module docstring for order.

    Class attributes:
        priority: Default priority of the hook ('NORMAL'); a config ``priority=`` overrides it.
    """

    priority: int | str = "NORMAL"

    # Bumped by every ``disable_stage``: a runner re-indexes its hooks when it changes.
    stage_generation = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in vars(cls).items():
            if callable(value) and name.startswith(_STAGE_PREFIXES) and name not in STAGES:
                raise ConfigError(
                    f"{cls.__qualname__}.{name} looks like a hook stage but is not one, so it "
                    f"would never be called.{did_you_mean(name, STAGES)} "
                    f"Stages: {', '.join(STAGES)}."
                )

    @property
    def state_key(self) -> str:
        """Key of this hook's state in checkpoints. Defaults to the class name."""
        return type(self).__name__

    def state_dict(self) -> dict:
        """State to save in checkpoints. Defaults to nothing (a stateless hook)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""

    def is_stateful(self) -> bool:
        return type(self).state_dict is not Hook.state_dict

    def disable_stage(self, stage: str) -> None:
        """Tell the runner never to call ``stage`` on this instance.

        For a stage the class implements but this configuration never needs (the runner then
        spends nothing on it per iteration). Call it in ``__init__``, or in any stage: the
        runner re-indexes its hooks after the stage call that disabled one.
        """
        if stage not in STAGES:
            raise ConfigError(f"Unknown hook stage '{stage}'.{did_you_mean(stage, STAGES)}")
        setattr(self, stage, types.MethodType(_noop, self))
        Hook.stage_generation += 1

    def uses_stage(self, stage: str) -> bool:
        """Whether this hook does anything at ``stage`` (the runner skips it otherwise)."""
        return getattr(getattr(self, stage), "__func__", None) is not _noop

    def __repr__(self) -> str:
        return type(self).__name__


def _noop(self: Hook, runner: Any, **kwargs: Any) -> None:
    """Does nothing; override in a subclass."""


for _stage in STAGES:
    setattr(Hook, _stage, _noop)
