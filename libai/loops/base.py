"""What every loop shares: a runner, a data loader, and the ``run()`` entry point."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["BaseLoop", "LoopRunner"]


class LoopRunner(Protocol):
    """What a loop may use of the runner, and all of it (tests/test_interfaces.py holds the
    loops of libai to it). Hooks have their own view (:class:`libai.hooks.hook.RunnerView`).

    The parts: ``model`` (as trained), ``optim_wrapper``, ``val_loop`` (None without one),
    ``message_hub``; ``data_parallel``: which share of the data this process reads.
    The steps: ``train_step_fn()`` returns ``step(data, optim_wrapper)`` for the run;
    ``run_eval_step(data)`` runs one evaluation step.
    The hooks: ``call_hook(stage, **kwargs)``; ``stage_methods``: ``{stage: bound methods}``, read
    once per iteration for the per-iteration stages instead of ``call_hook``.
    Where to stop: ``limit_iters(n)`` / ``limit_batches(n)``: the iterations or batches really
    run (fewer under ``--fast-dev-run``); ``should_stop`` (set by a hook); ``stop_request``: the
    signal poller while training (or None); ``stop_on_signal(signum)`` saves and raises.
    """

    model: Any
    message_hub: Any
    data_parallel: Any
    should_stop: bool
    stop_request: Any

    @property
    def optim_wrapper(self) -> Any: ...

    @property
    def val_loop(self) -> Any: ...

    @property
    def stage_methods(self) -> dict[str, tuple]: ...

    def call_hook(self, stage: str, **kwargs: Any) -> None: ...

    def train_step_fn(self) -> Callable[[Any, Any], dict]: ...

    def run_eval_step(self, data: Any) -> Any: ...

    def limit_iters(self, max_iters: int) -> int: ...

    def limit_batches(self, num_batches: int) -> int: ...

    def stop_on_signal(self, signum: int, val_interrupted: bool = False) -> None: ...


class BaseLoop:
    """A loop drives the work; hooks do the side work. Subclass and override ``run``.

    Args:
        runner: The runner that owns this loop (:class:`LoopRunner` says what it may use).
        dataloader: The data loader the loop iterates.
    """

    def __init__(self, runner: LoopRunner, dataloader: Any) -> None:
        self.runner = runner
        self.dataloader = dataloader

    def run(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement run()")

    def checkpoint_parts(self) -> dict[str, Any]:
        """The loop's parts of a checkpoint, by name (:class:`libai.checkpoint.Checkpointer`
        saves each under its name): ``{"loop": self}`` (its ``state_dict`` is the position).
        A training loop adds its data sampler; override to add more."""
        return {"loop": self}
