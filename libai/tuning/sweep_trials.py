"""Running a sweep's trials: one ``libai train`` process per trial, ``parallel`` at a time, each
stopped with the sweep on Ctrl-C or SIGTERM, and its value read from the trial's scalars (see
:mod:`libai.tuning.sweep`)."""

from __future__ import annotations

import ast
import json
import math
import os
import shlex
import subprocess
import sys
import threading
import time
from typing import Any

from libai.utils.errors import ConfigError
from libai.utils.optuna_study import build_pruner, open_storage
from libai.utils.suggest import did_you_mean

from .sweep_file import Sweep
from .sweep_progress import SweepProgress
from .sweep_report import _duration, _fmt

__all__ = ["PRUNED_MARKER", "STDERR_LINES", "TRAIN", "SweepRunner", "read_metric"]

# a trial is `libai train` in a process of its own; `-m` finds the libai this process runs
TRAIN = ("-m", "libai", "train")
PRUNED_MARKER = "optuna_pruned.json"  # written by libai.hooks.OptunaPruningHook
STDERR_LINES = 5


# ----------------------------------------------------------------------- running trials
class _TrialFailed(Exception):
    """A trial process failed; the message says why (recorded, the sweep goes on)."""


class _TrialInterrupted(Exception):
    """The sweep is stopping; the trial will be re-run on resume."""


class SweepRunner:
    """Runs the trials of a study: trial processes, interruption. It opens the study's storage
    (``storage``, ``storage_url``) and builds its ``pruner`` (see :mod:`libai.tuning.sweep_study`)."""

    def __init__(self, sweep: Sweep) -> None:
        import optuna

        self.optuna = optuna
        self.sweep = sweep
        self.stopping = threading.Event()
        self.procs: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.asking = threading.Lock()
        self.local = threading.local()
        self.storage_url = "sqlite:///" + os.path.join(sweep.study_dir, "study.db")
        self.storage = open_storage(self.storage_url)
        self.pruner = build_pruner(sweep.pruner)
        self.progress: SweepProgress | None = None  # while run_trials runs

    # ------------------------------------------------------------------------ a trial
    def objective(self, trial: Any) -> float:
        self._asked()
        try:
            if self.stopping.is_set():
                raise _TrialInterrupted("the sweep is stopping")
            return self._objective(trial)
        except (KeyboardInterrupt, _TrialInterrupted):
            trial.set_user_attr("interrupted", True)
            trial.set_user_attr("note", "interrupted: the sweep stopped")
            raise

    def _objective(self, trial: Any) -> float:
        sweep = self.sweep
        values = {p.name: p.suggest(trial) for p in sweep.params}
        trial_dir = os.path.join(sweep.study_dir, f"trial_{trial.number}")
        _move_aside(trial_dir)
        os.makedirs(trial_dir)
        options = [*sweep.cfg_options, *(sweep.option(k, v) for k, v in values.items())]
        if sweep.pruner is not None:
            options.append(self._hook_option(trial.number))
        cmd = [sys.executable, *TRAIN, sweep.config, "--work-dir", trial_dir,
               "--cfg-options", *options]
        trial.set_user_attr("work_dir", trial_dir)
        trial.set_user_attr("command", shlex.join(cmd))
        shown = "  ".join(f"{k}={_fmt(v)}" for k, v in values.items())
        place = ""
        if self.progress is not None:
            self.progress.started(trial.number, trial_dir, self._max_iters(values))
            place = self.progress.place(trial.number)
        self.say(f"trial {trial.number} started{place}: {shown}")
        rc, timed_out = self._run(cmd, trial_dir)
        if self.stopping.is_set():
            raise _TrialInterrupted("the sweep stopped")
        marker = os.path.join(trial_dir, PRUNED_MARKER)
        if rc == 0 and os.path.exists(marker):
            with open(marker, encoding="utf-8") as f:
                info = json.load(f)
            note = f"pruned at step {info.get('step')} ({sweep.metric} {info.get('value'):.4g})"
            trial.set_user_attr("note", note)
            raise self.optuna.TrialPruned(note)
        if timed_out:
            reason = f"timed out after {sweep.trial_timeout} s"
        elif rc != 0:
            reason = f"exit status {rc}: " + _tail(os.path.join(trial_dir, "stderr.txt"))
        else:
            value, reason = read_metric(trial_dir, sweep.metric, sweep.mode, sweep.summary)
            if reason is None:
                return value
        trial.set_user_attr("note", reason)
        raise _TrialFailed(reason)

    def _max_iters(self, values: dict[str, Any]) -> int | None:
        """The trial's ``train_cfg.max_iters`` (None for an epoch loop): its bar's length."""
        try:
            cfg = self.sweep.trial_config(values)
        except ConfigError:  # checked when the sweep file was read; a bar without a length
            return None
        train_cfg = cfg.get("train_cfg") or {}
        max_iters = train_cfg.get("max_iters") if isinstance(train_cfg, dict) else None
        return max_iters if isinstance(max_iters, int) and max_iters > 0 else None

    def _hook_option(self, number: int) -> str:
        """``+custom_hooks=[...]``: the config's own custom hooks and the pruning hook."""
        hook = dict(type="OptunaPruningHook", storage=self.storage_url,
                    study_name=self.sweep.study_name, trial_number=number,
                    monitor=self.sweep.metric, pruner=dict(self.sweep.pruner))
        own = self.sweep.base_cfg.to_dict().get("custom_hooks") or []
        hooks = [*own, hook]
        text = repr(hooks)
        try:
            same = ast.literal_eval(text) == hooks
        except (ValueError, SyntaxError):
            same = False
        if not same:
            raise ConfigError("pruning adds a hook to custom_hooks, but the config's "
                              "custom_hooks hold values with no literal form (classes?); "
                              "write them as dicts with type names.")
        return f"+custom_hooks={text}"

    def _run(self, cmd: list[str], trial_dir: str) -> tuple[int, bool]:
        env = dict(os.environ)
        if self.sweep.parallel > 1 and "OMP_NUM_THREADS" not in env:
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // self.sweep.parallel))
        with open(os.path.join(trial_dir, "stdout.txt"), "w") as out, \
                open(os.path.join(trial_dir, "stderr.txt"), "w") as err:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env=env)
            with self.lock:
                self.procs.add(proc)
            timed_out = False
            try:
                try:
                    rc = proc.wait(timeout=self.sweep.trial_timeout)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _stop(proc)
                    rc = proc.returncode
            except BaseException:  # Ctrl-C in this thread: the trial must not outlive us
                self.stopping.set()
                _stop(proc)
                raise
            finally:
                with self.lock:
                    self.procs.discard(proc)
        return rc, timed_out

    def run_trials(self, study: Any, count: int) -> bool:
        """Run ``count`` trials, ``parallel`` at a time; returns whether it was interrupted.

        Each worker thread runs ``study.optimize(n_trials=1)`` while trials are left (what
        ``n_jobs`` does inside optuna); the main thread only waits, so that on Ctrl-C or SIGTERM
        it stops the trial processes and then waits for the workers to record them.
        """
        left = [count]
        errors: list[BaseException] = []
        workers = min(self.sweep.parallel, count)
        finished = [threading.Event() for _ in range(workers)]

        def work(done: threading.Event) -> None:
            try:
                while not self.stopping.is_set():
                    with self.lock:
                        if left[0] <= 0:
                            return
                        left[0] -= 1
                    # one ask at a time: on SQLite two threads could pop the same queued trial
                    # or pick the same grid point; the objective releases it
                    self.asking.acquire()
                    self.local.asking = True
                    try:
                        study.optimize(self.objective, n_trials=1,
                                       catch=(_TrialFailed, _TrialInterrupted),
                                       callbacks=[self.on_trial_end])
                    finally:
                        self._asked()
            except BaseException as e:  # a bug: end the sweep with it
                errors.append(e)
                self.stopping.set()
                self._stop_all()
            finally:
                done.set()

        self.progress = progress = SweepProgress(count, self.sweep.metric, self.say)
        for i, done in enumerate(finished):
            threading.Thread(target=work, args=(done,), name=f"sweep-{i}", daemon=True).start()

        def wait() -> None:
            # Event.wait, not Thread.join: a join cut short by Ctrl-C may report a live thread
            # as finished (CPython 3.11), and the report would then miss its trial
            while not all(done.is_set() for done in finished):
                for done in finished:
                    done.wait(0.2)
                progress.poll()

        interrupted = False
        try:
            try:
                wait()
            except KeyboardInterrupt:  # from interrupt(): the trial processes are being stopped
                interrupted = True
                self.stopping.set()
                self._stop_all()
                wait()
        finally:
            progress.stop()
            self.progress = None
        if errors:
            raise errors[0]
        return interrupted

    def _asked(self) -> None:
        if getattr(self.local, "asking", False):
            self.local.asking = False
            self.asking.release()

    def _stop_all(self) -> None:
        with self.lock:
            procs = list(self.procs)
        for proc in procs:
            _stop(proc, wait=False)

    def interrupt(self, signum: int, frame: Any) -> None:
        """SIGINT / SIGTERM: stop the running trials, then end the sweep with Ctrl-C's error."""
        self.stopping.set()
        self._stop_all()
        raise KeyboardInterrupt

    def say(self, text: str) -> None:
        with self.lock:
            print(f"[sweep {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def on_trial_end(self, study: Any, t: Any) -> None:
        note = t.user_attrs.get("note", "")
        progress = self.progress
        place = progress.place(t.number) if progress is not None else ""
        if t.state.name == "COMPLETE":
            self.say(f"trial {t.number} complete{place}: {self.sweep.metric} = {t.value:.6g} "
                     f"({_duration(t)})")
        else:
            self.say(f"trial {t.number} {t.state.name.lower()}{place}: {note} ({_duration(t)})")
        if progress is not None:
            progress.finished(t.number)


def _stop(proc: subprocess.Popen, wait: bool = True) -> None:
    """Terminate a trial process (kill it if it lingers)."""
    if proc.poll() is not None:
        return
    try:
        proc.terminate()
        if wait:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    except ProcessLookupError:
        pass


def _move_aside(path: str) -> None:
    """A folder left by an older study of the same name: keep it, under another name."""
    if not os.path.exists(path):
        return
    i = 1
    while os.path.exists(f"{path}.old{i}"):
        i += 1
    os.replace(path, f"{path}.old{i}")


def _tail(path: str, lines: int = STDERR_LINES) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return "(no stderr)"
    return " | ".join(text[-lines:]) or "(empty stderr)"


def read_metric(trial_dir: str, key: str, mode: str, summary: str) -> tuple[float, str | None]:
    """(value, None) from the trial's scalars.jsonl files, or (nan, why not).

    Training, validation and test scalars are in the run folder's
    (``trial_dir/<timestamp>/scalars.jsonl``); ``trial_dir/scalars.jsonl`` of older libai versions
    is read first, where there is one.
    """
    import glob

    paths = [os.path.join(trial_dir, "scalars.jsonl"),
             *sorted(glob.glob(os.path.join(trial_dir, "*", "scalars.jsonl")))]
    paths = [p for p in paths if os.path.exists(p)]
    if not paths:
        return math.nan, (f"no scalars.jsonl in {trial_dir}: the sweep reads '{key}' from it "
                          f"(keep LoggerHook's JsonlBackend)")
    values, keys = [], set()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                keys.update(row)
                if key in row:
                    values.append(float(row[key]))
    if not values:
        names = sorted(k for k in keys if k != "step")
        return math.nan, (f"metric '{key}' not in the trial's scalars ({', '.join(names)})."
                          f"{did_you_mean(key, names)}")
    finite = [v for v in values if math.isfinite(v)]
    value = values[-1] if summary == "last" else (
        (max if mode == "max" else min)(finite) if finite else values[-1])
    if not math.isfinite(value):
        return math.nan, f"metric '{key}' is {value}"
    return value, None
