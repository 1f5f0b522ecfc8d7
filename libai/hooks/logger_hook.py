"""LoggerHook: when to log. Interval lines (worded by :class:`~libai.hooks.log_processor.
LogProcessor`), scalar backends (JSON lines, TensorBoard), progress bar, plots at the end."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Mapping
from typing import Any

import torch

from libai.registry import HOOKS, LOG_BACKENDS
from libai.utils.dist import all_reduce_mean
from libai.utils.errors import ConfigError
from libai.visualization.backends import (
    BaseLogBackend,
    JsonlBackend,
    default_backends,
    log_run_config,
    log_run_summary,
)
from libai.visualization.plots import draw_in_background, plot_scalars, saved_message
from libai.visualization.progress import Heartbeat, ProgressBar

from ._interval_sums import RunningSum, iterations_to_log
from .hook import Hook, RunnerView
from .log_processor import LogProcessor

__all__ = ["LoggerHook"]


@HOOKS.register_module()
class LoggerHook(Hook):
    """Log training progress every ``interval`` iterations and validation metrics after each set.

    Per iteration it only adds the step's logged values (the detached 0-d tensors in
    ``outputs``) to a running sum on their device and advances the progress bar. Every
    ``interval`` iterations, at the end of an epoch and at the last iteration it reads the sums
    once, averages them over ranks (one collective), stores ``train/<name>`` in the message hub,
    logs one line (worded by its :class:`~libai.hooks.log_processor.LogProcessor`,
    ``self.processor``) and writes the scalars to the backends at ``step = runner.iter + 1``::

        Iter [120/1000]  lr: 1.0000e-03  eta: 0:01:02  time: 0.0123  data_time: 0.0010  loss: 0.4321
        Epoch [2/10][30/45]  lr: ...

    ``time``/``data_time`` are the IterTimerHook's averages over ``window_size`` iterations,
    ``eta`` extrapolates this session's average speed (validation included), ``lr`` is the first
    param group's, and the optimizer wrapper's ``scalars()`` (``grad_norm``, ``loss_scale``) are
    the values at the logged step. On CUDA ``memory`` is the peak allocated memory in MiB.
    ThroughputHook's figures are written for reading (``3,323 samples/s  7.12 TFLOP/s  MFU 41.2%``);
    the backends get their full values (``train/samples_per_s``, ``train/tflops``, ``train/mfu``).

    Only rank 0 writes backends, draws the bar (on a terminal only) and plots.

    Args:
        interval: Log every this many iterations (within the epoch for epoch loops). Defaults to
            50.
        window_size: Iterations the time averages cover. Defaults to None (= ``interval``).
        log_metric_by_epoch: In epoch loops, label validation lines by epoch
            (``Epoch(val) [3/10]``) and add ``"epoch"`` to their JSON line. Backend steps stay
            iterations, so that a resumed run can drop what follows it. Defaults to False.
        backends: Config dicts (or instances) of LOG_BACKENDS. Defaults to None: JsonlBackend
            and TensorboardBackend (which warns once and stays off without tensorboard).
            ``[]`` writes no scalar files.
        progress_bar: Show a live bar with iterations done, elapsed time and ETA. Defaults to
            True.
        plot: At the end of the run, draw the scalars of scalars.jsonl as PNGs in
            ``<run folder>/plots/``: ``overview.png`` (loss, lr, validation metrics and
            iteration time on one page) and one per scalar family (needs a JsonlBackend).
            Drawn next to the scalars (in the series' run folder). A ``--fast-dev-run``
            writes no scalars and draws nothing.
            True: in a background process (``plot_process``) that appends "Saved ..." to the
            run's log when done, while the run's test and teardown go on; the run's process
            waits for it before it exits (``plots.EXIT_WAIT_S``, 60 s at most, then stops it with
            a line saying so), so nothing in the work dir changes after exit. "wait": in this
            process, before the run ends. False: no plots. Defaults to True.
        heartbeat: Where no bar is drawn (output not a terminal, or ``progress_bar=False``),
            rank 0 logs a short line (iteration, rate, ETA) after an iteration or evaluation
            batch that ends this many seconds after the last line. None: off. Defaults to 30.
    """

    priority = "BELOW_NORMAL"

    def __init__(
        self,
        interval: int = 50,
        window_size: int | None = None,
        log_metric_by_epoch: bool = False,
        backends: list[dict | BaseLogBackend] | None = None,
        progress_bar: bool = True,
        plot: bool | str = True,
        heartbeat: float | None = 30.0,
    ) -> None:
        for name, value in (("interval", interval), ("window_size", window_size)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ConfigError(f"LoggerHook: {name} must be an int >= 1, got {value!r}.")
        self.interval = interval
        self.window_size = window_size or interval
        self.log_metric_by_epoch = log_metric_by_epoch
        self.processor = LogProcessor(log_metric_by_epoch)
        self.progress_bar = progress_bar
        if plot not in (True, False, "wait"):
            raise ConfigError(f"LoggerHook: plot must be True (background), 'wait' or False, "
                              f"got {plot!r}.")
        self.plot = plot
        if heartbeat is not None and (isinstance(heartbeat, bool)
                                      or not isinstance(heartbeat, int | float) or heartbeat <= 0):
            raise ConfigError(f"LoggerHook: heartbeat must be a number of seconds > 0 or None "
                              f"(off), got {heartbeat!r}.")
        self.heartbeat = heartbeat
        self._beat = Heartbeat(None)
        self.plot_process: subprocess.Popen | None = None
        cfgs = default_backends() if backends is None else list(backends)
        self.backends: list[BaseLogBackend] = [
            b
            if isinstance(b, BaseLogBackend)
            else LOG_BACKENDS.build(b, path=f"LoggerHook.backends.{i}")
            for i, b in enumerate(cfgs)
        ]
        self._sums = RunningSum()
        self._bar = ProgressBar(enabled=False)
        self._opened = False
        self._training = False
        self._trained = False  # this process trained: its test goes into the same series
        self._dry = False
        self._by_epoch = False
        self._max_iters = 0
        self._per_epoch: int | None = None
        self._log_len = 1  # rows of the current interval after which its line is due
        self._eval_set = 0
        self._cuda_device: torch.device | None = None
        self._final: dict[str, float] = {}  # last value of each scalar written (log_summary)

    # ------------------------------------------------------------------------ lifecycle
    def before_run(self, runner: RunnerView) -> None:
        self._bar = ProgressBar(enabled=self.progress_bar and runner.rank == 0)
        self._dry = bool(runner.fast_dev_run)  # a dry run writes no scalars
        self._beat = Heartbeat(self.heartbeat if runner.rank == 0 and not self._bar.enabled
                               else None)

    def before_train(self, runner: RunnerView) -> None:
        self._training = True
        self._by_epoch = runner.max_epochs is not None
        self._max_iters = runner.limit_iters(runner.max_iters)  # what this run reaches (--fast-dev-run: 2)
        self._per_epoch = runner.train_loop.iters_per_epoch
        self.processor.start_train(runner, self._max_iters, self._per_epoch)
        self._beat.start(runner.iter)
        self._sums.reset()
        device = torch.device(runner.device)
        self._cuda_device = device if device.type == "cuda" else None
        # A fresh run starts a series in its own run folder; a resumed one continues the series
        # of its checkpoint (runner.checkpointer.series_dir), where what an earlier attempt logged past the
        # restored iteration is set aside, so steps never repeat or go backwards.
        self._open(runner, resume_step=runner.iter)
        self._bar.add("train", "train", total=self._max_iters, completed=runner.iter)

    def after_train(self, runner: RunnerView) -> None:
        if self._sums.iterations:  # stopped early, between two intervals
            self._log_train(runner, batch_idx=None, done=runner.iter)
        self._training = False
        self._trained = True
        self._bar.remove("train")

    def after_run(self, runner: RunnerView) -> None:
        self._bar.stop()
        if runner.rank != 0 or not self._opened:
            return
        log_run_summary(self.backends, self._final, runner.checkpointer.best())
        for backend in self.backends:
            backend.close()
        self._opened = False
        if self.plot:
            self._plot(runner)

    def _open(self, runner: RunnerView, resume_step: int | None = None) -> None:
        if self._opened or runner.rank != 0 or self._dry:
            return
        # training, and the test right after it, write into the series of the training; an
        # eval-only run (tools/test.py) into its own run folder, so it never appends a backwards
        # step to a training series
        if self._training or self._trained:
            target = runner.checkpointer.series_dir or runner.log_dir
        else:
            target = runner.log_dir
        for backend in self.backends:
            backend.open(target, resume_step=resume_step)
        self._opened = True
        log_run_config(self.backends, runner.cfg, experiment_name=runner.experiment_name,
                       run_name=os.path.basename(runner.log_dir))  # the run's timestamp

    def before_save_checkpoint(self, runner: RunnerView, checkpoint: Any = None) -> None:
        # the scalars on disk then reach every checkpoint a later run may resume from
        if self._opened:
            for backend in self.backends:
                backend.flush()

    def _write(self, runner: RunnerView, scalars: dict[str, float], step: int) -> None:
        if runner.rank != 0 or not scalars or self._dry:
            return
        self._open(runner)
        self._final.update(scalars)
        for backend in self.backends:
            backend.add_scalars(scalars, step)

    # ---------------------------------------------------------------------------- train
    def after_train_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        rows = self._sums.rows
        if not rows:  # a new interval: how many iterations until its line is due
            self._log_len = iterations_to_log(runner.iter, batch_idx, self.interval,
                                              self._max_iters, self._by_epoch, self._per_epoch)
        rows.append(outputs)
        if self._bar.enabled:
            self._bar.advance("train")
        if len(rows) >= self._log_len:
            self._log_train(runner, batch_idx, runner.iter + 1)
        elif self._beat.due():
            head = self.processor.head(batch_idx, runner.iter + 1, runner.epoch)
            self._say(runner, self._beat.train_line(head, runner.iter + 1, self._max_iters,
                                                    self.interval))

    def _say(self, runner: RunnerView, line: str) -> None:
        runner.logger.info(line)
        self._beat.mark()

    def _log_train(self, runner: RunnerView, batch_idx: int | None, done: int) -> None:
        n = self._sums.iterations
        means = all_reduce_mean(self._sums.means())  # the one sync of the interval
        self._sums.reset()
        hub = runner.message_hub
        scalars = {f"train/{k}": v for k, v in means.items()}
        for k, v in scalars.items():
            hub.update_scalar(k, v, count=n, step=done)
        optim = runner.optim_wrapper
        extra: dict[str, float] = {}
        for name, values in optim.get_lr().items():
            if values:
                extra[name] = float(values[0])
        extra.update({k: float(v) for k, v in optim.scalars().items()})
        if self._cuda_device is not None:
            extra["memory"] = torch.cuda.max_memory_allocated(self._cuda_device) / 2**20
        for k, v in extra.items():
            hub.update_scalar(f"train/{k}", v, step=done)
        timing = {
            k: hub.mean(f"train/{k}", self.window_size)
            for k in ("time", "data_time")
            if hub.has(f"train/{k}")
        }
        if runner.logger.isEnabledFor(logging.INFO):  # a quiet run skips formatting the line
            self._say(runner, self.processor.train_line(batch_idx, done, runner.epoch, means,
                                                        extra, timing))
        self._write(
            runner, {**scalars, **{f"train/{k}": v for k, v in {**extra, **timing}.items()}}, done
        )

    # ----------------------------------------------------------------------- val / test
    def before_val(self, runner: RunnerView) -> None:
        self._eval_set = 0

    before_test = before_val

    def _eval_total(self, runner: RunnerView, stage: str) -> int | None:
        loop = runner.val_loop if stage == "val" else runner.test_loop
        if getattr(loop, "num_batches", None) is not None:  # limit_batches, --fast-dev-run
            return loop.num_batches
        sets = list(getattr(loop, "sets", {}).values())
        try:
            return len(sets[self._eval_set][0])
        except (IndexError, TypeError):
            return None

    def before_val_epoch(self, runner: RunnerView) -> None:
        self._start_eval(runner, "val")

    def before_test_epoch(self, runner: RunnerView) -> None:
        self._start_eval(runner, "test")

    def _start_eval(self, runner: RunnerView, stage: str) -> None:
        self.processor.start_eval()
        total = self._eval_total(runner, stage)
        self._beat.start_eval(stage, total)
        self._bar.add(stage, stage, total=total)

    def after_val_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        self._eval_iter(runner, "val", batch_idx)

    def after_test_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        self._eval_iter(runner, "test", batch_idx)

    def _eval_iter(self, runner: RunnerView, stage: str, batch_idx: int) -> None:
        self._bar.advance(stage)
        if self._beat.due():
            self._say(runner, self._beat.eval_line(batch_idx + 1))

    def after_val_epoch(self, runner: RunnerView, metrics: Mapping[str, Any] | None = None) -> None:
        self._log_metrics(runner, "val", metrics)

    def after_test_epoch(self, runner: RunnerView, metrics: Mapping[str, Any] | None = None) -> None:
        self._log_metrics(runner, "test", metrics)

    def _log_metrics(self, runner: RunnerView, stage: str, metrics: Mapping[str, Any] | None) -> None:
        self._bar.remove(stage)
        self._eval_set += 1
        scalars: dict[str, float] = {}
        for k, v in (metrics or {}).items():
            try:
                scalars[k] = float(v)
            except (TypeError, ValueError):
                continue
        samples = runner.message_hub.get_info("eval_samples")
        self._say(runner, self.processor.eval_line(stage, self._training, runner, scalars, samples))
        row: dict[str, float] = dict(scalars)
        if self.processor.metrics_by_epoch(self._training):
            row["epoch"] = runner.epoch
        self._write(runner, row, runner.iter)

    # ---------------------------------------------------------------------------- plots
    def _plot(self, runner: RunnerView) -> None:
        jsonl = next((b for b in self.backends if isinstance(b, JsonlBackend) and b.path), None)
        if jsonl is None or not os.path.exists(jsonl.path):
            return
        out_dir = os.path.join(os.path.dirname(jsonl.path), "plots")
        if self.plot != "wait":  # drawn by a process of its own: the run ends without waiting
            again = self.plot_process is not None  # the test after training: draw with its rows
            if again and self.plot_process.poll() is None:
                self.plot_process.terminate()  # superseded; its PNGs are written atomically
            try:
                self.plot_process = draw_in_background(jsonl.path, out_dir, _log_file(runner))
            except OSError as e:
                runner.logger.warning(f"LoggerHook: could not start the plot process ({e}).")
                return
            if not again:
                runner.logger.info(
                    f"Plots of the scalars: drawing {os.path.join(out_dir, 'overview.png')} and "
                    f"one PNG per scalar in the background.")
            return
        try:
            paths = plot_scalars(jsonl.path, out_dir)
        except Exception as e:  # a plot must never fail a finished run
            runner.logger.warning(
                f"LoggerHook: could not draw the plots ({type(e).__name__}: {e})."
            )
            return
        if paths:
            runner.logger.info(saved_message(paths))


def _log_file(runner: RunnerView) -> str | None:
    """The run's log file: where the runner's logger writes, if to a file."""
    for handler in runner.logger.handlers:
        if isinstance(handler, logging.FileHandler):
            return handler.baseFilename
    return None
