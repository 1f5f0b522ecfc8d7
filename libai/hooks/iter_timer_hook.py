"""IterTimerHook: wall-clock time per iteration and the part of it spent waiting for data."""

from __future__ import annotations

import time
from typing import Any

from libai.registry import HOOKS

from .hook import Hook, RunnerView

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
        # the train timer, apart: it runs every iteration and appends to the hub's histories
        # directly (one value each, count 1: what update_scalar would do, without the call)
        self._train_last = time.perf_counter()
        self._data_time: Any = None
        self._iter_time: Any = None

    def _start(self, mode: str) -> None:
        if mode == "train":
            self._train_last = time.perf_counter()
        else:
            self._last[mode] = time.perf_counter()

    def _before_iter(self, runner: RunnerView, mode: str) -> None:
        now = time.perf_counter()
        runner.message_hub.update_scalar(f"{mode}/data_time", now - self._last.get(mode, now))

    def _after_iter(self, runner: RunnerView, mode: str) -> None:
        now = time.perf_counter()
        runner.message_hub.update_scalar(f"{mode}/time", now - self._last.get(mode, now))
        self._last[mode] = now

    # ------------------------------------------------------------------------------- train
    def _start_train(self, runner: RunnerView) -> None:
        hub = runner.message_hub
        self._data_time = hub.history("train/data_time")
        self._iter_time = hub.history("train/time")
        self._train_last = time.perf_counter()

    def before_train(self, runner: RunnerView) -> None:
        self._start_train(runner)

    def before_train_epoch(self, runner: RunnerView) -> None:
        self._start_train(runner)

    def before_train_iter(self, runner: RunnerView, batch_idx: int, data_batch: Any = None) -> None:
        h = self._data_time
        if h is None:  # a custom loop that skipped before_train
            self._start_train(runner)
            h = self._data_time
        h.values.append(time.perf_counter() - self._train_last)
        h.counts.append(1)

    def after_train_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        now = time.perf_counter()
        h = self._iter_time
        if h is None:
            self._start_train(runner)
            h = self._iter_time
        h.values.append(now - self._train_last)
        h.counts.append(1)
        self._train_last = now

    # ------------------------------------------------------------------------- val / test
    def before_val_epoch(self, runner: RunnerView) -> None:
        self._start("val")

    def before_val_iter(self, runner: RunnerView, batch_idx: int, data_batch: Any = None) -> None:
        self._before_iter(runner, "val")

    def after_val_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        self._after_iter(runner, "val")

    def after_val(self, runner: RunnerView, metrics: Any = None) -> None:
        self._start("train")

    def before_test_epoch(self, runner: RunnerView) -> None:
        self._start("test")

    def before_test_iter(self, runner: RunnerView, batch_idx: int, data_batch: Any = None) -> None:
        self._before_iter(runner, "test")

    def after_test_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        self._after_iter(runner, "test")

    def after_test(self, runner: RunnerView, metrics: Any = None) -> None:
        self._start("train")
