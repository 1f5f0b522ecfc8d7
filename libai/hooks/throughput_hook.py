"""ThroughputHook: the model summary at the start of training, the FLOPs of the first step, and
samples/s, tokens/s, TFLOP/s and MFU in every interval log line."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import torch

from libai.registry import HOOKS
from libai.utils.errors import ConfigError

from .hook import Hook, RunnerView

__all__ = [
    "PEAK_TFLOPS",
    "ThroughputHook",
    "batch_reader",
    "device_peak_tflops",
    "peak_tflops_by_name",
]

# Dense (no sparsity) peak TFLOP/s per GPU, from NVIDIA's data sheets: (name pattern, 16-bit
# tensor cores (bfloat16, or float16 where the GPU has no bfloat16), float32 without tensor
# cores). First match wins, so the specific names come before the general ones.
PEAK_TFLOPS: list[tuple[str, float, float]] = [
    (r"\bB200\b", 2250.0, 75.0),
    (r"\bH100\b.*\bNVL\b", 835.0, 60.0),
    (r"\bH100\b.*\bPCIe\b", 756.0, 51.0),
    (r"\bH100\b|\bH200\b|\bGH200\b", 989.0, 67.0),
    (r"\bA100\b", 312.0, 19.5),
    (r"\bA10\b", 125.0, 31.2),  # not A10G, whose tensor peak NVIDIA does not publish
    (r"\bL40S\b", 362.0, 91.6),
    (r"\bL40\b", 181.0, 90.5),
    (r"\bL4\b", 121.0, 30.3),
    (r"\bRTX A6000\b", 154.8, 38.7),
    (r"\bRTX 4090\b", 165.2, 82.6),  # GeForce: 16-bit with float32 accumulation
    (r"\bRTX 3090\b", 71.0, 35.6),
    (r"\bV100\b.*\bPCIe\b", 112.0, 14.0),  # float16 (no bfloat16)
    (r"\bV100\b", 125.0, 15.7),
    (r"\bT4\b", 65.0, 8.1),  # float16 (no bfloat16)
]

_HALF = (torch.bfloat16, torch.float16)


def peak_tflops_by_name(name: str, half: bool, tf32: bool = False) -> float | None:
    """The dense peak TFLOP/s of the GPU called ``name`` (``torch.cuda.get_device_name``) in
    :data:`PEAK_TFLOPS`: 16-bit (``half``), TF32 (``tf32``: half the 16-bit peak) or float32;
    None for a GPU the table does not list."""
    for pattern, half_peak, fp32_peak in PEAK_TFLOPS:
        if re.search(pattern, name):
            if half:
                return half_peak
            return half_peak / 2 if tf32 else fp32_peak
    return None


def device_peak_tflops(device: Any, half: bool) -> float | None:
    """The dense peak TFLOP/s of ``device`` for 16-bit (``half``) or float32 matrix products,
    or None when unknown (a CPU, an unlisted GPU).

    float32 on an Ampere or newer GPU counts TF32 tensor cores (half the 16-bit peak) when
    ``torch.get_float32_matmul_precision()`` allows them, the plain float32 rate otherwise.
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    tf32 = (torch.get_float32_matmul_precision() != "highest"
            and torch.cuda.get_device_capability(device)[0] >= 8)
    return peak_tflops_by_name(torch.cuda.get_device_name(device), half, tf32)


def batch_reader(batch: Any) -> Callable[[Any], tuple[int, int]] | None:
    """A function ``batch -> (samples, tokens)`` for batches shaped like ``batch``: samples are
    the first dimension of ``input_ids`` or of the first tensor, tokens ``input_ids.numel()``
    (0 without input_ids). None when the batch holds no tensor with a batch dimension."""
    if isinstance(batch, dict):
        ids = batch.get("input_ids")
        if isinstance(ids, torch.Tensor) and ids.ndim:
            return lambda b: (len(t := b["input_ids"]), t.numel())
        for key, value in batch.items():
            if isinstance(value, torch.Tensor) and value.ndim:
                return lambda b: (len(b[key]), 0)
        return None
    if isinstance(batch, (list, tuple)) and batch:
        first = batch[0]
        if isinstance(first, torch.Tensor) and first.ndim:
            return lambda b: (len(b[0]), 0)
        if isinstance(first, dict):  # a list of samples, uncollated
            return lambda b: (len(b), 0)
        return None
    if isinstance(batch, torch.Tensor) and batch.ndim:
        return lambda b: (len(b), 0)
    return None


def _pipeline_part(runner: RunnerView) -> str | None:
    """Under a pipeline each process holds its stages' part of the model, and the summary is
    rank 0's: say so under its table, instead of passing a part for the whole."""
    if runner.execution.stages is None:
        return None
    stages, total = runner.execution.stages
    return (f"Pipeline: the table counts process 0's part of the model only, stage"
            f"{'s' if len(stages) > 1 else ''} {', '.join(map(str, stages))} of {total} (the "
            f"others are on the other processes); `libai summary CONFIG` counts the whole "
            f"model in one process.")


@HOOKS.register_module()
class ThroughputHook(Hook):
    """See what a run does and how fast: model summary, FLOPs per step, throughput and MFU.

    - ``before_train``: the model summary (one row per top-level module: type, parameters,
      trainable; the total and the size in MiB by dtype; :mod:`libai.model.summary`), logged
      on rank 0. Under a pipeline that is rank 0's stages, and a line under the table says so.
    - The first training step runs inside ``torch.utils.flop_counter.FlopCounterMode``: the
      real step, nothing extra (no forward of its own, no random numbers drawn, gradients
      untouched). Its count, forward + backward (matrix products, convolutions, attention), is
      logged once and kept in ``message_hub.info['flops_per_step']``. Later steps pay nothing
      for it; a resumed run takes the count from its checkpoint and counts nothing (an op
      that FlopCounterMode decomposes, such as ``silu``'s backward, computes ~1e-9 apart in
      the counted step). Under graph mode (GraphOptimWrapper, ``compile=``) it does not count and says
      FLOPs are unknown: ``tools/model_summary.py`` counts the same step eagerly. Counting
      cannot end the run: a counter that fails logs one warning (``FLOPs unknown: ...``) and the
      run trains on without TFLOP/s or MFU. Attention is counted on every SDPA kernel, the CPU's
      and grouped-query attention's included (:mod:`libai.model.flops`).
    - At each LoggerHook interval it adds to that iteration's logged values, so they appear in
      the log line (formatted for reading: ``3,323 samples/s  7.12 TFLOP/s  MFU 41.2%``), the
      message hub (``train/<name>``), scalars.jsonl and TensorBoard (full values):
      ``samples_per_s`` (all data-parallel ranks together: tensor-parallel peers count once), ``tokens_per_s`` (when batches are dicts with
      ``input_ids``: their ``numel()``, padding included), ``tflops`` (achieved model TFLOP/s
      per device: the first step's FLOPs, scaled by the interval's tokens, else samples, over
      the interval's time) and ``mfu`` (``tflops`` / the device's dense peak, when known:
      :data:`PEAK_TFLOPS`, or ``peak_tflops``). Times are the IterTimerHook's ``train/time``
      over the interval, as in the line's ``time``.

    Per iteration it reads the batch size (``len`` of a tensor, and ``numel`` of
    ``input_ids``: shape reads, no device sync); the rest happens once per interval. Needs the
    LoggerHook (for the interval) and the IterTimerHook (for the time); without them it logs
    the summary and FLOPs only.

    Args:
        summary: Log the model summary at the start of training. Defaults to True.
        count_flops: Count the FLOPs of the first step. Defaults to True.
        throughput: Add samples/s, tokens/s, TFLOP/s and MFU to the log lines. Defaults to True.
        peak_tflops: The device's peak TFLOP/s for MFU, when the table does not know it (or to
            compare against another figure). Defaults to None (the table's, by the GPU's name
            and the training dtype; no MFU on a CPU).

    Turn it off with ``default_hooks=dict(throughput=None)``.
    """

    # after IterTimerHook (NORMAL) has timed the iteration, before LoggerHook (BELOW_NORMAL)
    # reads the iteration's logged values
    priority = 55

    def __init__(self, summary: bool = True, count_flops: bool = True, throughput: bool = True,
                 peak_tflops: float | None = None) -> None:
        if peak_tflops is not None and (isinstance(peak_tflops, bool)
                                        or not isinstance(peak_tflops, (int, float))
                                        or peak_tflops <= 0):
            raise ConfigError(f"ThroughputHook: peak_tflops must be a positive number, "
                              f"got {peak_tflops!r}.")
        self.summary = summary
        self.count_flops = count_flops
        self.throughput = throughput
        self.peak_tflops = float(peak_tflops) if peak_tflops is not None else None
        self.flops_per_step: int | None = None  # counted on the first step
        self.first_samples = 0  # the counted step's batch
        self.first_tokens = 0
        self._counter: Any = None  # the FlopCounterMode, while the first step runs
        self._armed = False  # the next step is to be counted
        self._said_unknown = False  # "FLOPs ... unknown (graph mode ...)" was logged
        self._reader: Callable[[Any], tuple[int, int]] | None = None
        self._read_first = True  # look at the first batch's structure
        self._peak: float | None = None
        self._interval = 0
        self._by_epoch = False
        self._per_epoch: int | None = None
        self._max_iters = 0
        self._reset()
        if not count_flops:
            self.disable_stage("before_train_iter")

    def _reset(self) -> None:
        self._n = 0  # iterations of the current log interval
        self._due = 1
        self._samples = 0
        self._tokens = 0

    # ------------------------------------------------------------------------ lifecycle
    def before_train(self, runner: RunnerView) -> None:
        self._reset()
        if self.summary and runner.rank == 0 and runner.logger.isEnabledFor(logging.INFO):
            from libai.model.summary import format_summary, summarize_model

            part = _pipeline_part(runner)
            runner.logger.info(format_summary(summarize_model(runner.unwrapped_model))
                               + (f"\n{part}" if part else ""))
        count = self.count_flops and self.flops_per_step is None
        if count and self._restore_count(runner):
            count = False
        why = runner.execution.flops_uncountable if count else None
        if why is not None:
            count = False
            if not self._said_unknown:  # once per hook, however often training starts
                self._said_unknown = True
                runner.logger.info(
                    f"FLOPs per training step: unknown ({why}; `python tools/model_summary.py "
                    f"CONFIG` counts it eagerly), so the log lines show no TFLOP/s or MFU.")
        self._armed = count
        if not count:
            self.disable_stage("before_train_iter")
        writer = runner.writer  # the LoggerHook: its interval is the one of the log lines
        if not self.throughput or writer is None:
            self._interval = 0
            if not count:
                self.disable_stage("after_train_iter")  # nothing left per iteration
            return
        self._interval = writer.interval
        self._by_epoch = runner.max_epochs is not None
        self._per_epoch = runner.train_loop.iters_per_epoch
        # where this run stops (fewer iterations under fast_dev_run): LoggerHook logs the rest
        # of that interval at after_train, with what was added at the last iteration
        self._max_iters = runner.limit_iters(runner.max_iters)
        if self.peak_tflops is not None:
            self._peak = self.peak_tflops
        else:
            half = getattr(runner.optim_wrapper, "dtype", None) in _HALF or any(
                p.dtype in _HALF for p in runner.unwrapped_model.parameters())
            self._peak = device_peak_tflops(runner.device, half)

    def _restore_count(self, runner: RunnerView) -> bool:
        """Take the count of the run a resumed run continues (from its checkpoint's message
        hub) instead of counting again: FlopCounterMode decomposes the ops it has no formula
        for (``silu_backward``...), so a counted step can compute ~1e-9 apart from a plain one,
        and the resumed run would then not continue bit for bit."""
        info = runner.message_hub.info
        flops, batch = info.get("flops_per_step"), info.get("flops_counted_batch")
        if not (isinstance(flops, int) and flops > 0 and isinstance(batch, str)):
            return False
        samples, _, tokens = batch.partition(",")
        self.flops_per_step, self.first_samples, self.first_tokens = flops, int(samples), int(tokens)
        from libai.model.summary import format_flops

        runner.logger.info(f"FLOPs per training step: {format_flops(flops)} (counted by the run "
                           f"this one resumes)")
        return True

    def after_run(self, runner: RunnerView) -> None:
        self._stop_counting()  # the first step raised: never leave the mode on

    # ---------------------------------------------------------------------------- train
    def before_train_iter(self, runner: RunnerView, batch_idx: int, data_batch: Any = None) -> None:
        # the first step only: counted inside the mode, entered last before the step runs
        # (this hook's priority) and left in after_train_iter
        self.disable_stage("before_train_iter")  # in effect from the next iteration
        if not self._armed:
            return
        self._armed = False
        from libai.model.flops import flop_counter

        counter = flop_counter()  # its formulas cannot raise into the step (counter.failure)
        try:
            counter.__enter__()
        except Exception as e:  # measuring must never end the run: the count is what is lost
            self._flops_unknown(runner, f"the counter did not start ({type(e).__name__}: {e})")
            return
        self._counter = counter

    def _flops_unknown(self, runner: RunnerView, why: str) -> None:
        """The one warning line of a count that failed; training goes on without TFLOP/s, MFU."""
        runner.logger.warning(f"FLOPs unknown: {why}; the log lines show no TFLOP/s or MFU.")

    def _stop_counting(self) -> tuple[int | None, str | None]:
        """Leave the mode: (the total, None), or (None, why counting failed); (None, None)
        when nothing was being counted. Never raises: measuring must not end the run."""
        counter, self._counter = self._counter, None
        if counter is None:
            return None, None
        try:
            counter.__exit__(None, None, None)
        except Exception as e:
            return None, f"the counter failed to stop ({type(e).__name__}: {e})"
        if counter.failure is not None:
            return None, f"counting the first step failed in {counter.failure}"
        return counter.get_total_flops(), None

    def _first_step_done(self, runner: RunnerView, data_batch: Any) -> None:
        flops, why = self._stop_counting()
        if why is not None:
            self._flops_unknown(runner, why)
        if flops is None:
            return
        reader = batch_reader(data_batch)
        samples, tokens = reader(data_batch) if reader is not None else (0, 0)
        if not flops:
            runner.logger.info(
                "FLOPs per training step: unknown (FlopCounterMode counted no matrix product, "
                "convolution or attention in the first step).")
            return
        self.flops_per_step, self.first_samples, self.first_tokens = flops, samples, tokens
        runner.message_hub.update_info("flops_per_step", flops)
        # a str: the message hub keeps plain values only in checkpoints
        runner.message_hub.update_info("flops_counted_batch", f"{samples},{tokens}")
        from libai.model.summary import format_flops

        per = [f"{format_flops(flops / samples)} per sample"] if samples else []
        per += [f"{format_flops(flops / tokens)} per token"] if tokens else []
        batch = f"{samples} samples" + (f", {tokens} tokens" if tokens else "") if samples else ""
        runner.logger.info(
            f"FLOPs per training step: {format_flops(flops)} (forward + backward, counted by "
            f"FlopCounterMode on the first step" + (f": {batch}" if batch else "") + ")"
            + (f"; {', '.join(per)}" if per else "")
            + (f"; device peak {self._peak:g} TFLOP/s" if self._peak else ""))

    def after_train_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        if self._counter is not None:
            self._first_step_done(runner, data_batch)
            if not self._interval:
                self.disable_stage("after_train_iter")
                return
        n = self._n
        if not n:  # a new interval: the iterations until LoggerHook's line is due
            self._due = self._iterations_to_log(runner.iter, batch_idx)
            if self._read_first:
                self._read_first = False
                self._reader = batch_reader(data_batch)
        self._n = n = n + 1
        if n < self._due:
            return  # the per-iteration cost: the lines above (the batch is read at the line only)
        reader = self._reader
        if reader is not None:
            try:
                samples, tokens = reader(data_batch)
            except Exception:  # a batch shaped otherwise: no sample counts from here on
                self._reader = None
            else:  # the interval's batches taken as this one (an epoch's short last one aside)
                self._samples, self._tokens = samples * n, tokens * n
        self._emit(runner, outputs)

    def _iterations_to_log(self, it: int, batch_idx: int) -> int:
        """LoggerHook's rule: at multiples of its interval (within the epoch for epoch loops),
        an epoch's end and the last iteration (of this run)."""
        if self._by_epoch:
            n = self._interval - batch_idx % self._interval
            if self._per_epoch:
                n = min(n, self._per_epoch - batch_idx)
        else:
            n = self._interval - it % self._interval
        return max(1, min(n, self._max_iters - it))

    def _emit(self, runner: RunnerView, outputs: Any) -> None:
        n, samples, tokens = self._n, self._samples, self._tokens
        self._reset()
        hub = runner.message_hub
        if type(outputs) is not dict or not hub.has("train/time"):
            return
        seconds = hub.mean("train/time", n) * n  # this interval's iterations, host time
        if seconds <= 0:
            return
        values: dict[str, float] = {}
        if self._reader is not None and samples:
            values["samples_per_s"] = samples * runner.data_parallel.size / seconds
            if tokens:
                values["tokens_per_s"] = tokens * runner.data_parallel.size / seconds
        flops = self.flops_per_step
        if flops:
            if tokens and self.first_tokens:
                work = flops * tokens / self.first_tokens
            elif samples and self.first_samples:
                work = flops * samples / self.first_samples
            else:
                work = flops * n
            values["tflops"] = work / seconds / 1e12
            if self._peak:
                values["mfu"] = values["tflops"] / self._peak
        # logged values of this iteration (0-d CPU tensors, like the step's): LoggerHook
        # averages each key over the iterations that have it, here just this one
        for key, value in values.items():
            outputs[key] = torch.tensor(value, dtype=torch.float64)
