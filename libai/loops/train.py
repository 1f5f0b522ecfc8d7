"""Training loops: by iterations or by epochs. Both keep their position so that a resume can
continue with exactly the batches an uninterrupted run would have seen next."""

from __future__ import annotations

from typing import Any

from libai.checkpoint import get_rng_state, set_rng_state
from libai.registry import LOOPS
from libai.utils.errors import ConfigError
from libai.utils.signals import StopRequested

from .base import BaseLoop, LoopRunner

__all__ = ["IterBasedTrainLoop", "EpochBasedTrainLoop", "SamplerState"]


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"train_cfg.{name} must be a positive int, got {value!r}")
    return value


class _TrainLoop(BaseLoop):
    """Position bookkeeping and the single-iteration step shared by both training loops."""

    def __init__(self, runner: LoopRunner, dataloader: Any, val_interval: int, val_begin: int) -> None:
        super().__init__(runner, dataloader)
        self.val_interval = _positive("val_interval", val_interval)
        self.val_begin = val_begin
        self.iters_per_epoch = len(dataloader)
        if self.iters_per_epoch == 0:
            raise ConfigError(
                "train_dataloader yields no batch: the dataset is empty or smaller than one "
                "batch with drop_last=True. Lower batch_size or check the dataset."
            )
        # Plain attributes, not properties: hooks read them every iteration. Only the loop
        # (and load_state_dict) writes them.
        self.iter = 0  # iterations completed
        self.epoch = 0  # the current epoch, 0-based
        self._batch_in_epoch = 0  # batches of the current epoch already consumed
        self._step_done = False  # inside after_train_iter: the optimizer step has happened
        self._step: Any = None  # (train step function, optim wrapper), held by run()
        self._val_pending = False  # a signal stopped the validation due at this iteration
        self.start_iter = 0  # where run() started: a stop there has nothing new to save

    def _poll_stop(self, stop: Any) -> None:
        """Between two steps: a signal received by any rank stops training here (the runner
        saves this iteration and raises). ``stop`` is ``runner.stop_request`` or None."""
        if stop is not None:
            signum = stop.poll()
            if signum:
                self.runner.stop_on_signal(signum)

    def _validate(self, val_loop: Any, stop: Any) -> None:
        """Validate; a signal during it stops training at this iteration, with the RNG state the
        validation started from, and the checkpoint asks the resumed run to redo it."""
        self._val_pending = False
        rng = get_rng_state() if stop is not None else None
        try:
            val_loop.run()
        except StopRequested as e:
            set_rng_state(rng)
            self._val_pending = True
            self.runner.stop_on_signal(e.signum, val_interrupted=True)

    def _set_epoch(self) -> None:
        sampler = getattr(self.dataloader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)

    def _hold_step(self) -> None:
        """Look up the step function and optimizer wrapper once per run, not per iteration."""
        self._step = (self.runner.train_step_fn(), self.runner.optim_wrapper)

    def run_iter(self, batch_idx: int, data_batch: Any) -> None:
        runner = self.runner
        hooks = runner.stage_methods  # runner.call_hook(stage, ...), inlined: it runs per iteration
        for method in hooks.get("before_train_iter", ()):
            method(runner, batch_idx=batch_idx, data_batch=data_batch)
        if self._step is None:  # a custom loop's run() that did not hold it
            self._hold_step()
        step, optim_wrapper = self._step
        outputs = step(data_batch, optim_wrapper)
        self._step_done = True  # a checkpoint taken from now on must count this iteration
        try:
            for method in hooks.get("after_train_iter", ()):
                method(runner, batch_idx=batch_idx, data_batch=data_batch, outputs=outputs)
        finally:
            self.iter += 1
            self._step_done = False

    def state_dict(self) -> dict:
        """The position a resumed run starts from.

        Inside ``after_train_iter`` (where CheckpointHook saves) the step of the current
        iteration is done but ``iter`` not yet incremented: it counts as completed. A finished
        epoch is saved as the start of the next one, so a resume neither replays its end-of-epoch
        hooks nor iterates an exhausted sampler.
        """
        done = self.iter + (1 if self._step_done else 0)
        if self._batch_in_epoch >= self.iters_per_epoch:
            state = {"iter": done, "epoch": self.epoch + 1, "batch_in_epoch": 0}
        else:
            state = {"iter": done, "epoch": self.epoch, "batch_in_epoch": self._batch_in_epoch}
        if self._val_pending:  # only in a checkpoint written when a signal stopped validation
            state["val_pending"] = True
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore the position (the ``sampler`` part, loaded next, skips the consumed part of
        the epoch)."""
        self.iter = int(state["iter"])
        self.epoch = int(state["epoch"])
        self._batch_in_epoch = int(state["batch_in_epoch"])
        self._val_pending = bool(state.get("val_pending", False))


    def checkpoint_parts(self) -> dict[str, Any]:
        """``loop`` (the position) and, when the data sampler keeps a state (DefaultSampler's
        epoch and seed), ``sampler``, loaded after the loop: see :class:`SamplerState`."""
        parts: dict[str, Any] = {"loop": self}
        sampler = getattr(self.dataloader, "sampler", None)
        if hasattr(sampler, "state_dict") and hasattr(sampler, "load_state_dict"):
            parts["sampler"] = SamplerState(self)
        return parts


class SamplerState:
    """The training loop's data sampler as a checkpoint part: the sampler's own state, and on
    load the skip of the batches of the epoch the loop had consumed (so the loop's position
    must be loaded first), so that a resumed run reads the batches the stopped one would have.

    Args:
        loop: The training loop; its ``dataloader.sampler`` is read at each save and load.
    """

    def __init__(self, loop: _TrainLoop) -> None:
        self.loop = loop

    def state_dict(self) -> dict:
        return self.loop.dataloader.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        loader = self.loop.dataloader
        loader.sampler.load_state_dict(state)
        loader.sampler.skip(self.loop._batch_in_epoch * (loader.batch_size or 1))


@LOOPS.register_module()
class IterBasedTrainLoop(_TrainLoop):
    """Train for ``max_iters`` iterations, cycling over the data loader as often as needed.

    ``before_train_epoch``/``after_train_epoch`` are called once, around the whole run.
    ``max_epochs`` sizes the run by the data instead (fine-tuning on a file of one's own: 3
    epochs of whatever it holds): ``max_epochs x iterations per epoch`` iterations. Given both,
    the run stops at whichever comes first (as Lightning's ``max_steps`` and ``max_epochs``), so
    ``--cfg-options train_cfg.max_iters=10`` shortens an epoch-sized config. Intervals and
    schedules stay in iterations.

    Args:
        runner: The runner.
        dataloader: The training data loader.
        max_iters: Iterations to train. Defaults to None: ``max_epochs`` sizes the run.
        val_interval: Validate every this many iterations, and after the last. Defaults to 1000.
        val_begin: First iteration after which validation may run. Defaults to 1.
        max_epochs: Passes over the data to train. Defaults to None: ``max_iters`` does.

    Raises:
        ConfigError: neither ``max_iters`` nor ``max_epochs`` is given, or one is not a
            positive int.
    """

    def __init__(self, runner: LoopRunner, dataloader: Any, max_iters: int | None = None,
                 val_interval: int = 1000, val_begin: int = 1,
                 max_epochs: int | None = None) -> None:
        super().__init__(runner, dataloader, val_interval, val_begin)
        if max_iters is None and max_epochs is None:
            raise ConfigError("train_cfg needs max_iters (iterations) or max_epochs (passes over "
                              "the training data), e.g. train_cfg.max_epochs=3.")
        by_data = None if max_epochs is None else \
            _positive("max_epochs", max_epochs) * self.iters_per_epoch
        self.max_iters = by_data if max_iters is None else min(
            _positive("max_iters", max_iters), by_data or max_iters)
        self.max_epochs = None  # the loop counts iterations (logs, hooks): see epochs_asked
        self.epochs_asked = max_epochs
        self._data_iter = None

    def _next_epoch(self) -> None:
        self.epoch += 1
        self._batch_in_epoch = 0
        self._set_epoch()
        self._data_iter = iter(self.dataloader)

    def run(self) -> None:
        runner = self.runner
        stop_at = runner.limit_iters(self.max_iters)
        runner.call_hook("before_train")
        runner.call_hook("before_train_epoch")
        runner.model.train()  # the eval loops restore the mode they found
        self._hold_step()
        val_loop = runner.val_loop  # looked up once: this loop runs every iteration
        stop, self.start_iter = runner.stop_request, self.iter
        if self._val_pending and val_loop is not None:  # a signal stopped it last time
            self._validate(val_loop, stop)
        if self._data_iter is None and self.iter < stop_at:
            self._set_epoch()
            self._data_iter = iter(self.dataloader)
        try:
            while self.iter < stop_at and not runner.should_stop:
                self._poll_stop(stop)
                try:
                    batch = next(self._data_iter)
                except StopIteration:
                    self._next_epoch()
                    batch = next(self._data_iter)
                self._batch_in_epoch += 1
                self.run_iter(self._batch_in_epoch - 1, batch)
                if val_loop is not None and self._should_validate(stop_at):
                    self._validate(val_loop, stop)
        except BaseException:
            self._data_iter = None  # the run ends here: see below
            raise
        if self.iter >= self.max_iters:
            # nothing left to read: the loader's workers stop now. Kept until the loop is
            # collected, they would wait out their 5 s join timeout each (the collector
            # finalizes their queues before telling them to stop)
            self._data_iter = None
        runner.call_hook("after_train_epoch")
        runner.call_hook("after_train")

    def _should_validate(self, stop_at: int) -> bool:
        if self.iter < self.val_begin:
            return False
        return self.iter % self.val_interval == 0 or self.iter == stop_at


@LOOPS.register_module()
class EpochBasedTrainLoop(_TrainLoop):
    """Train for ``max_epochs`` passes over the data loader.

    Args:
        runner: The runner.
        dataloader: The training data loader.
        max_epochs: Epochs to train.
        val_interval: Validate every this many epochs, and after the last. Defaults to 1.
        val_begin: First epoch after which validation may run. Defaults to 1.
    """

    def __init__(self, runner: LoopRunner, dataloader: Any, max_epochs: int, val_interval: int = 1,
                 val_begin: int = 1) -> None:
        super().__init__(runner, dataloader, val_interval, val_begin)
        self.max_epochs = _positive("max_epochs", max_epochs)
        self.max_iters = self.max_epochs * self.iters_per_epoch

    def run(self) -> None:
        runner = self.runner
        stop_at = runner.limit_iters(self.max_iters)
        runner.call_hook("before_train")
        self._hold_step()
        stop, self.start_iter = runner.stop_request, self.iter
        if self._val_pending and runner.val_loop is not None:  # a signal stopped it last time
            self._validate(runner.val_loop, stop)
        while self.epoch < self.max_epochs and self.iter < stop_at and not runner.should_stop:
            self._poll_stop(stop)
            self.run_epoch(stop_at, stop)
            if runner.should_stop and self._batch_in_epoch != 0:
                break  # stopped inside the epoch: neither count it as done nor validate
            done = self.epoch
            if runner.val_loop is not None and done >= self.val_begin and (
                done % self.val_interval == 0 or done == self.max_epochs
            ):
                self._validate(runner.val_loop, stop)
        runner.call_hook("after_train")

    def run_epoch(self, stop_at: int, stop: Any = None) -> None:
        runner = self.runner
        runner.call_hook("before_train_epoch")
        runner.model.train()
        self._set_epoch()
        for batch in self.dataloader:
            self._batch_in_epoch += 1
            self.run_iter(self._batch_in_epoch - 1, batch)
            if runner.should_stop or self.iter >= stop_at:
                break
            if self._batch_in_epoch < self.iters_per_epoch:  # at the end: after its hooks
                self._poll_stop(stop)
        if self._batch_in_epoch == self.iters_per_epoch:
            runner.call_hook("after_train_epoch")
            self.epoch += 1
            self._batch_in_epoch = 0
