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

import logging
import types
from typing import Any, Protocol

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["Hook", "RunnerView", "STAGES", "PRIORITIES", "StageIndex", "get_priority"]

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



class RunnerView(Protocol):
    """What a hook may use of the runner, and all of it (tests/test_interfaces.py holds every
    hook of libai to it). mmengine's runner properties and detectron2's hook contract are the
    models; the shared services are attributes, so hooks never look for each other.

    The run:
        cfg: The validated, read-only Config.
        work_dir: The folder of checkpoints and run folders.
        log_dir: This run's folder (``work_dir/<timestamp>``; a temporary one under
            ``--fast-dev-run``).
        experiment_name: ``cfg.experiment_name``, or the config's file name.
        fast_dev_run: Iterations of a dry run (0: a real run); a dry run writes nothing.

    Services:
        logger: Prints on rank 0, and writes the run's log file.
        message_hub: Scalar histories and info shared by hooks and loops.
        writer: The LoggerHook (its ``interval``, its ``backends``) or None without one.
        checkpointer: The :class:`~libai.checkpoint.Checkpointer`: ``save``, ``wait``, ``best()``,
            ``series_dir`` (where training writes its scalars).

    Parts (built on first use):
        model: As trained (possibly wrapped); unwrapped_model: the model itself; execution: how
        it runs (:class:`~libai.model.execution.Execution`: pipeline stages, compiled, sharded,
        whether FLOPs can be counted), the one place to ask.
        optim_wrapper, param_schedulers, train_loop, val_loop, test_loop (None without their
        config); a loop has ``dataloader``.

    Position:
        iter: Completed training iterations; epoch: the current epoch (0-based);
        max_iters, max_epochs (None for an iteration loop); ``limit_iters(n)``: the iterations
        this run really reaches (fewer under ``fast_dev_run``); should_stop: set True to end
        training after the current iteration.

    Process:
        rank: This process's rank; data_parallel: which share of the data it reads
        (:class:`~libai.utils.dist.DataParallel`); device: where the model is.

    And ``call_hook(stage, **kwargs)``, to call a stage on every hook.
    """

    cfg: Any
    work_dir: str
    log_dir: str
    experiment_name: str
    fast_dev_run: int
    logger: logging.Logger
    message_hub: Any
    writer: Any
    checkpointer: Any
    model: Any
    unwrapped_model: Any
    execution: Any
    should_stop: bool
    rank: int
    data_parallel: Any
    device: Any

    @property
    def optim_wrapper(self) -> Any: ...

    @property
    def param_schedulers(self) -> list: ...

    @property
    def train_loop(self) -> Any: ...

    @property
    def val_loop(self) -> Any: ...

    @property
    def test_loop(self) -> Any: ...

    @property
    def iter(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def max_iters(self) -> int: ...

    @property
    def max_epochs(self) -> int | None: ...

    def limit_iters(self, max_iters: int) -> int: ...

    def call_hook(self, stage: str, **kwargs: Any) -> None: ...


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
        spends nothing on it per iteration). Call it in ``__init__``, or in any stage: it is in
        effect from the next call of a stage (the next iteration, for a per-iteration stage).
        """
        if stage not in STAGES:
            raise ConfigError(f"Unknown hook stage '{stage}'.{did_you_mean(stage, STAGES)}")
        if not self.uses_stage(stage):
            return
        setattr(self, stage, types.MethodType(_noop, self))
        Hook.stage_generation += 1

    def uses_stage(self, stage: str) -> bool:
        """Whether this hook does anything at ``stage`` (the runner skips it otherwise)."""
        return getattr(getattr(self, stage), "__func__", None) is not _noop

    def __repr__(self) -> str:
        return type(self).__name__


class StageIndex:
    """Per stage, the hooks that act at it and their bound methods, in priority order.

    A stage no hook uses costs nothing per iteration: methods are looked up once, here, and again
    only after a hook disabled a stage (:meth:`Hook.disable_stage`). The loops call the methods
    of the per-iteration stages from :attr:`methods` directly, reading it once per iteration.
    """

    def __init__(self, hooks: list[Hook]) -> None:
        self.hooks = hooks
        self._index()

    def _index(self) -> None:
        self.generation = Hook.stage_generation
        used = {stage: [h for h in self.hooks if h.uses_stage(stage)] for stage in STAGES}
        self.by_stage = {stage: hooks for stage, hooks in used.items() if hooks}
        self._methods = {stage: tuple(getattr(h, stage) for h in hooks)
                         for stage, hooks in self.by_stage.items()}

    @property
    def methods(self) -> dict[str, tuple]:
        """``{stage: (bound methods...)}`` for the stages some hook uses."""
        if self.generation != Hook.stage_generation:  # a hook disabled a stage
            self._index()
        return self._methods

    def summary(self) -> str:
        """One line: the hooks in priority order (printed at start-up; ``order_text`` per stage
        under ``log_level='DEBUG'``)."""
        names = ", ".join(f"{type(h).__name__}({h.priority})" for h in self.hooks)
        return f"Hooks, in priority order: {names} (per stage: log_level='DEBUG')"

    def order_text(self) -> str:
        """The hooks called at each stage, in order (logged at DEBUG level at start-up)."""
        lines = ["Hooks, in call order per stage:"]
        for stage, hooks in self.by_stage.items():
            names = ", ".join(f"{type(h).__name__}({h.priority})" for h in hooks)
            lines.append(f"  {stage:<24} {names}")
        return "\n".join(lines)


def _noop(self: Hook, runner: RunnerView, **kwargs: Any) -> None:
    """Does nothing; override in a subclass."""


for _stage in STAGES:
    setattr(Hook, _stage, _noop)
