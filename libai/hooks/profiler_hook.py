"""ProfilerHook: ``torch.profiler`` over a window of training iterations.

::

    custom_hooks = [dict(type="ProfilerHook", wait=1, warmup=1, active=3)]

The profiler follows ``torch.profiler.schedule(wait, warmup, active, repeat)`` counted in train
iterations from ``begin``: ``wait`` iterations run untouched, ``warmup`` iterations run with the
profiler started but its records thrown away (the first records carry start-up costs), then
``active`` iterations are recorded; that is one cycle, done ``repeat`` times. At the end of
each cycle the hook writes, in ``<log_dir>/profiler/``:

- ``trace_rank<r>_iter<a>-<b>.json``: a Chrome trace of iterations a..b (1-based, as the log's
  ``Iter [a/N]``); open it in https://ui.perfetto.dev or chrome://tracing.
- ``tb/rank<r>.<ns>.pt.trace.json``: the trace as ``torch.profiler.tensorboard_trace_handler``
  writes and names it (a trace can be exported only once: with both outputs the Chrome file is
  hard-linked, or copied, there); ``tensorboard --logdir <log_dir>/profiler/tb`` with the
  ``torch-tb-profiler`` plugin shows it.
- the top operators (``prof.key_averages().table(sort_by=..., row_limit=...)``) in the run's
  log.

Cost: before ``begin`` the hook only compares ``runner.iter`` once per iteration; once the
window is over it stops the profiler and disables its per-iteration stages (the runner drops
them at its next ``call_hook``, e.g. the next validation or ``after_train``; until then they
return at once), so the rest of training runs as without it. The profiler never changes what is computed: a profiled run
ends with the same weights as one without the hook.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from libai.registry import HOOKS
from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

from .hook import Hook, RunnerView

__all__ = ["ProfilerHook"]

_OUTPUTS = ("chrome", "tensorboard")
_ACTIVITIES = ("cpu", "cuda")
_SORT_KEYS = (
    "cpu_time", "cuda_time", "device_time", "cpu_time_total", "cuda_time_total",
    "device_time_total", "self_cpu_time_total", "self_cuda_time_total", "self_device_time_total",
    "cpu_memory_usage", "self_cpu_memory_usage", "cuda_memory_usage", "self_cuda_memory_usage",
    "device_memory_usage", "self_device_memory_usage", "count", "flops",
)


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"ProfilerHook: {name} must be an int >= {minimum}, got {value!r}.")
    return value


def _choices(name: str, value: Any, allowed: Sequence[str]) -> tuple[str, ...]:
    """``value`` (one name or a sequence of names) as a tuple of lower-case allowed names."""
    items = (value,) if isinstance(value, str) else tuple(value)
    out = []
    for item in items:
        key = str(item).lower()
        if key not in allowed:
            raise ConfigError(
                f"ProfilerHook: unknown {name} {item!r}.{did_you_mean(str(item), allowed)} "
                f"Choose from {', '.join(map(repr, allowed))}."
            )
        if key not in out:
            out.append(key)
    return tuple(out)


def _span(first: int, last: int) -> str:
    return f"iteration {first}" if first == last else f"iterations {first}-{last}"


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # no second copy of a trace that may be large
    except OSError:
        shutil.copyfile(src, dst)


@HOOKS.register_module()
class ProfilerHook(Hook):
    """Profile a window of training iterations with ``torch.profiler``; see the module docstring.

    The hook runs last (LOWEST) so that ``prof.step()`` ends an iteration after every other
    hook's ``after_train_iter``: each profiler step holds one whole iteration (the next batch's
    loading, the hooks, the forward, backward and optimizer step). A validation that falls inside
    the window is recorded in the step of the iteration that follows it.

    Args:
        wait: Iterations at the start of each cycle that run without the profiler. Defaults to 1.
        warmup: Iterations profiled and thrown away before the recorded ones. Defaults to 1.
        active: Iterations recorded per cycle. Defaults to 3.
        repeat: Cycles; each writes its own trace files and table. Defaults to 1.
        begin: The train iteration (``runner.iter``, 0-based) at which the first cycle starts.
            Defaults to None: the first iteration this run trains (after a resume, the resumed
            one). A ``begin`` already passed when training starts begins at once.
        activities: "cpu" and/or "cuda". Defaults to None: CPU, plus CUDA when the run is on a
            CUDA device.
        record_shapes: Record operator input shapes. Defaults to False.
        profile_memory: Record tensor allocations and frees. Defaults to False.
        with_stack: Record Python source locations (larger traces). Defaults to False.
        with_flops: Estimate FLOPs of matrix multiplications and convolutions. Defaults to False.
        on_trace_ready: What each cycle writes: "chrome" (``trace_rank<r>_iter<a>-<b>.json``),
            "tensorboard" (``tb/``), both, or ``()`` for only the table in the log. Defaults to
            ("chrome", "tensorboard").
        sort_by: Column the operator table is sorted by. Defaults to "self_cpu_time_total"
            ("self_cuda_time_total" ranks GPU kernels).
        row_limit: Rows of the operator table. Defaults to 10.
        all_ranks: Profile every rank (file names carry the rank). Defaults to False: rank 0
            only.
        dirname: Folder under ``runner.log_dir`` for the files. Defaults to "profiler".

    Raises:
        ConfigError: a bad count, an unknown activity, output or sort key, or "cuda" asked for
            without CUDA.
    """

    priority = "LOWEST"

    def __init__(
        self,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        begin: int | None = None,
        activities: str | Sequence[str] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        on_trace_ready: str | Sequence[str] = _OUTPUTS,
        sort_by: str = "self_cpu_time_total",
        row_limit: int = 10,
        all_ranks: bool = False,
        dirname: str = "profiler",
    ) -> None:
        self.wait = _count("wait", wait, 0)
        self.warmup = _count("warmup", warmup, 0)
        self.active = _count("active", active, 1)
        self.repeat = _count("repeat", repeat, 1)
        self.begin = None if begin is None else _count("begin", begin, 0)
        self.activities = None if activities is None else _choices(
            "activity", activities, _ACTIVITIES)
        if self.activities is not None and "cuda" in self.activities and not (
                torch.cuda.is_available()):
            raise ConfigError("ProfilerHook: activities include 'cuda' but CUDA is not "
                              "available; leave activities=None to profile what the run uses.")
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.with_stack = bool(with_stack)
        self.with_flops = bool(with_flops)
        self.outputs = _choices("on_trace_ready output", on_trace_ready, _OUTPUTS)
        if sort_by not in _SORT_KEYS:
            raise ConfigError(f"ProfilerHook: unknown sort_by {sort_by!r}."
                              f"{did_you_mean(str(sort_by), _SORT_KEYS)} Choose from "
                              f"{', '.join(_SORT_KEYS)}.")
        self.sort_by = sort_by
        self.row_limit = _count("row_limit", row_limit, 1)
        self.all_ranks = bool(all_ranks)
        self.dirname = dirname
        self.trace_files: list[str] = []  # the Chrome traces written, in order
        self._stack: contextlib.ExitStack | None = None  # holds the running profiler
        self._prof: Any = None
        self._start = 0  # runner.iter at which the schedule starts
        self._steps = 0  # profiler steps taken
        self._recorded: list[int] = []  # iterations (0-based) recorded in the current cycle
        self._cycles = 0  # cycles reported
        self._done = False

    @property
    def window(self) -> int:
        """Iterations from the start of the schedule to the end of its last cycle."""
        return (self.wait + self.warmup + self.active) * self.repeat

    # ------------------------------------------------------------------------ stages
    def before_train(self, runner: RunnerView) -> None:
        if self._done:
            return
        if runner.rank != 0 and not self.all_ranks:
            self._retire()
            return
        self._start = runner.iter if self.begin is None else max(self.begin, runner.iter)
        if self.begin is not None and runner.iter > self.begin:
            runner.logger.info(
                f"ProfilerHook: training starts at iteration {runner.iter + 1}, past begin="
                f"{self.begin}: the profiler's schedule starts there."
            )

    def before_train_iter(self, runner: RunnerView, batch_idx: int = 0, data_batch: Any = None) -> None:
        if self._prof is None and not self._done and runner.iter >= self._start:
            self.disable_stage("before_train_iter")  # nothing more to do here
            try:
                self._open(runner)
            except Exception as e:  # measuring must never end the run
                self._lost(runner, "the profiler did not start", e)

    def after_train_iter(
        self, runner: RunnerView, batch_idx: int = 0, data_batch: Any = None, outputs: Any = None
    ) -> None:
        prof = self._prof
        if prof is None:
            return
        if prof.current_action.name.startswith("RECORD"):
            self._recorded.append(runner.iter)
        if self.repeat > 1:  # each cycle reports its own events, as documented: no warning
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Warning: Profiler clears events")
                prof.step()
        else:
            try:
                prof.step()  # may call _trace_ready: the cycle's last recorded iteration ended
            except Exception as e:  # measuring must never end the run
                self._lost(runner, "the profiler failed", e)
                return
        self._steps += 1
        if self._steps >= self.window:
            self._close(runner)

    def after_train(self, runner: RunnerView) -> None:
        if self._stack is None and not self._done:  # the window never began
            self._retire()
            runner.logger.warning(
                f"ProfilerHook: training ended after iteration {runner.iter}, before the "
                f"profiler's window (from iteration {self._start + 1}): nothing profiled."
            )
            return
        self._close(runner, early=True)

    def after_run(self, runner: RunnerView) -> None:
        self._close(runner, early=True)  # training ended by an exception: never leave it running

    # ----------------------------------------------------------------------- helpers
    def _open(self, runner: RunnerView) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        names = self.activities
        if names is None:
            names = ("cpu", "cuda") if torch.device(runner.device).type == "cuda" else ("cpu",)
        activity = {"cpu": ProfilerActivity.CPU, "cuda": ProfilerActivity.CUDA}
        prof = profile(
            activities=[activity[n] for n in names],
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active,
                              repeat=self.repeat),
            on_trace_ready=functools.partial(self._trace_ready, runner),
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
            with_flops=self.with_flops,
        )
        self._stack = contextlib.ExitStack()
        self._prof = self._stack.enter_context(prof)  # as `with profile(...)`, closed by _close
        self._steps = 0
        self._recorded = []
        cycle = self.wait + self.warmup + self.active
        ends = [self._start + (c + 1) * cycle for c in range(self.repeat)]  # 1-based, last
        spans = [_span(end - self.active + 1, end) for end in ends]
        runner.logger.info(
            f"ProfilerHook: profiling ({', '.join(names)}) from iteration {self._start + 1} "
            f"(wait {self.wait}, warmup {self.warmup}, active {self.active}, repeat "
            f"{self.repeat}): recording {', '.join(spans)}."
        )

    def _close(self, runner: RunnerView, early: bool = False) -> None:
        """Stop the profiler (a partly recorded cycle is still written) and retire the hook."""
        if self._stack is None:
            return
        stack, self._stack = self._stack, None
        recorded = bool(self._recorded)
        try:
            stack.close()  # profile.__exit__: stops it, fires on_trace_ready if it was recording
        except Exception as e:  # measuring must never end the run
            runner.logger.warning(f"Profile lost: the profiler failed to stop "
                                  f"({type(e).__name__}: {e}); training goes on.")
            recorded = True  # said once: no second "nothing written" line
        finally:
            self._prof = None
            self._retire()
        if early and not recorded and not self._cycles:
            runner.logger.warning(
                f"ProfilerHook: training ended after iteration {runner.iter}, before the "
                f"profiler recorded any iteration (the first would have been "
                f"{self._start + self.wait + self.warmup + 1}): nothing written."
            )

    def _lost(self, runner: RunnerView, what: str, e: Exception) -> None:
        """One warning line for a profiler that failed; stop it if it runs, and retire."""
        runner.logger.warning(f"Profile lost: {what} ({type(e).__name__}: {e}); training "
                              f"goes on.")
        stack, self._stack, self._prof = self._stack, None, None
        if stack is not None:
            with contextlib.suppress(Exception):
                stack.close()
        self._retire()

    def _retire(self) -> None:
        """Off the per-iteration stages for the rest of the run."""
        self._done = True
        for stage in ("before_train_iter", "after_train_iter"):
            if self.uses_stage(stage):
                self.disable_stage(stage)

    def _trace_ready(self, runner: RunnerView, prof: Any) -> None:
        """``on_trace_ready``: write the cycle's trace files and its operator table."""
        if not self._recorded:
            return
        first, last = self._recorded[0] + 1, self._recorded[-1] + 1
        self._recorded = []
        self._cycles += 1
        rank = runner.rank
        out_dir = os.path.join(runner.log_dir, self.dirname)
        written = []
        try:
            if self.outputs:
                os.makedirs(out_dir, exist_ok=True)
            chrome = os.path.join(out_dir, f"trace_rank{rank}_iter{first}-{last}.json")
            tb_dir = os.path.join(out_dir, "tb")
            if "chrome" in self.outputs:
                prof.export_chrome_trace(chrome)  # a trace can be exported only once
                self.trace_files.append(chrome)
                written.append(f"Chrome trace {chrome} (open in https://ui.perfetto.dev or "
                               f"chrome://tracing)")
            if "tensorboard" in self.outputs:
                if "chrome" in self.outputs:  # the same file, named as the handler names it
                    os.makedirs(tb_dir, exist_ok=True)
                    _link_or_copy(chrome, os.path.join(
                        tb_dir, f"rank{rank}.{time.time_ns()}.pt.trace.json"))
                else:
                    from torch.profiler import tensorboard_trace_handler

                    tensorboard_trace_handler(tb_dir, worker_name=f"rank{rank}")(prof)
                written.append(f"TensorBoard trace in {tb_dir} (tensorboard --logdir {tb_dir}, "
                               f"with the torch-tb-profiler plugin)")
        except Exception as e:  # a full disk (or an export that fails) must not end the run
            runner.logger.warning(f"ProfilerHook: could not write the trace: {e}")
        try:
            table = prof.key_averages().table(sort_by=self.sort_by, row_limit=self.row_limit)
        except Exception as e:  # the table is telemetry too
            table = f"(no operator table: {type(e).__name__}: {e})"
        lines = [f"ProfilerHook: {_span(first, last)} (rank {rank}), top {self.row_limit} "
                 f"operators by {self.sort_by}:", table, *written]
        runner.logger.info("\n".join(lines))

    def __repr__(self) -> str:
        return (f"ProfilerHook(wait={self.wait}, warmup={self.warmup}, active={self.active}, "
                f"repeat={self.repeat})")
