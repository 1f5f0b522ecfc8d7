"""IterTimerHook: wall-clock time per iteration and the part of it spent waiting for data."""

from __future__ import annotations

import time
from typing import Any

from libai.registry import HOOKS

from .hook import Hook

__all__ = ["IterTimerHook"]


@HOOKS.register_module()
class IterTimerHook(Hook):
    """Record ``<mode>/data_time`` and ``<mode>/time`` in the message hub at every iteration.

    ``mode`` is ``train``, ``val`` or ``test``. ``data_time`` runs from the end of the previous
    iteration (or the start of the epoch) to ``before_*_iter``: the time spent waiting for the data
    loader. ``time`` runs from the same point to ``after_*_iter``: the whole iteration.

    Host timers only (``time.perf_counter``), no device synchronisation: on an accelerator the
    times are those of the host, which runs ahead of the device until something syncs (the
    logger's interval reduction, a ``.item()``); averaged over a logging window they match.
    A validation run inside training restarts the train timer, so that its duration is not
    counted as the next train iteration's data time.
    """

    priority = "NORMAL"

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._train_last = time.perf_counter()  # the train timer, apart: it runs every iteration

    def _start(self, mode: str) -> None:
        if mode == "train":
            self._train_last = time.perf_counter()
        else:
            self._last[mode] = time.perf_counter()

    def _before_iter(self, runner: Any, mode: str) -> None:
        now = time.perf_counter()
        runner.message_hub.update_scalar(f"{mode}/data_time", now - self._last.get(mode, now))

    def _after_iter(self, runner: Any, mode: str) -> None:
        now = time.perf_counter()
        runner.message_hub.update_scalar(f"{mode}/time", now - self._last.get(mode, now))
        self._last[mode] = now

    # ------------------------------------------------------------------------------- train
    def before_train(self, runner: Any) -> None:
        self._start("train")

    def before_train_epoch(self, runner: Any) -> None:
        self._start("train")

    def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
        runner.message_hub.update_scalar("train/data_time", time.perf_counter() - self._train_last)

    def after_train_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        now = time.perf_counter()
        runner.message_hub.update_scalar("train/time", now - self._train_last)
        self._train_last = now

    # ------------------------------------------------------------------------- val / test
    def before_val_epoch(self, runner: Any) -> None:
        self._start("val")

    def before_val_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
        self._before_iter(runner, "val")

    def after_val_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        self._after_iter(runner, "val")

    def after_val(self, runner: Any, metrics: Any = None) -> None:
        self._start("train")

    def before_test_epoch(self, runner: Any) -> None:
        self._start("test")

    def before_test_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
        self._before_iter(runner, "test")

    def after_test_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        self._after_iter(runner, "test")

    def after_test(self, runner: Any, metrics: Any = None) -> None:
        self._start("train")
