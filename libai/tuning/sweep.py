"""Hyper-parameter sweep: run ``libai train`` once per trial, driven by an Optuna study.

    libai sweep SWEEP_FILE [--parallel N] [--trials N] [--study-dir DIR] [--debug]

A sweep file (Python, YAML or JSON, read with ``Config.fromfile``) says what to vary::

    config = "configs/digits_mlp.py"            # relative to this file, else to the current folder
    metric = dict(key="val/accuracy", mode="max")   # summary="last" (default) or "best"
    strategy = "grid"                           # or "random", "bayes" (Optuna's TPESampler)
    trials = 8                                  # for random / bayes (--trials overrides)
    params = {
        "optim_wrapper.optimizer.lr": dict(type="float", low=1e-4, high=1e-2, log=True),
        "model.hidden": dict(type="int", low=32, high=256, log=True),
        "optim_wrapper.optimizer.weight_decay": dict(choices=[0.0, 1e-4]),
    }
    cfg_options = ["train_cfg.max_iters=300"]   # fixed options of every trial
    pruner = dict(type="MedianPruner", n_warmup_steps=1)   # optional: any optuna.pruners class

Optional keys: ``seed`` (0), ``study_name`` (the sweep file's name), ``study_dir``
(``work_dirs/sweeps/<study_name>``), ``parallel`` (1) and ``trial_timeout`` (seconds, none).

A parameter is ``dict(choices=[...])`` (or just a list), or a range ``dict(type='float' | 'int',
low=, high=, log=False, step=None)``. A grid takes every combination, so each of its
parameters needs choices or a range with a ``step``. Each parameter key must exist in the
config (``+key`` adds one).

Each trial is ``python -m libai train CONFIG --work-dir STUDY_DIR/trial_N --cfg-options <fixed
options> <the trial's values>``, a process of its own: a trial that crashes is recorded as
FAIL with the last lines of its stderr (``STUDY_DIR/trial_N/stderr.txt`` has all of it) and the
sweep goes on. The trial's value is its metric in its run folder's scalars
(``trial_N/<timestamp>/scalars.jsonl``): the last value (``summary="last"``) or the best one
(``summary="best"``). ``--parallel N`` runs N trials at once
(each with ``OMP_NUM_THREADS`` = CPU cores / N unless set).

With a ``pruner``, each trial gets an ``OptunaPruningHook`` (through ``+custom_hooks``) that
reports the metric after each validation and ends the run early when the pruner says so; the
trial is then PRUNED.

The study is kept in ``STUDY_DIR/study.db`` (SQLite): run the same command again to resume. Trials
that finished (complete, pruned or failed) are never run again; a trial that was running when
the sweep was stopped (Ctrl-C, kill) is marked FAIL ("interrupted") and re-run with the same
parameters. Changing the sweep (config, metric, strategy, params, fixed options, seed) and
resuming is refused: use another ``--study-dir``. ``--trials`` may be raised to extend a random
or bayes sweep.

At the end: a table of the trials sorted by the metric, ``trials.csv``, ``best_config.py`` (the
config with the fixed options and the best trial's values merged in, work_dir
``STUDY_DIR/best``: ``python tools/train.py STUDY_DIR/best_config.py``) and Optuna's plots:
``optimization_history.png``, ``param_importances.png`` (fANOVA, from 2 complete trials) and
``intermediate_values.png`` (with a pruner).

From Python: :func:`run_sweep`; ``libai sweep`` and ``python tools/sweep.py`` parse its arguments.
"""

from __future__ import annotations

import ast
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import types
from typing import Any

from libai.utils.errors import ConfigError
from libai.utils.optuna_study import build_pruner, open_storage
from libai.utils.suggest import did_you_mean

from .sweep_file import KEYS, STRATEGIES, Param, Sweep  # noqa: F401  (the sweep file's API)
from .sweep_report import _duration, _fmt, _show, report

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
    """Runs the study: trial processes, interruption, resume bookkeeping."""

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

    # -------------------------------------------------------------------------- study
    def open_study(self) -> Any:
        optuna, sweep = self.optuna, self.sweep
        direction = "maximize" if sweep.mode == "max" else "minimize"
        existing = self._existing_trials()
        study = optuna.create_study(
            study_name=sweep.study_name, storage=self.storage, sampler=self._sampler(existing),
            pruner=self.pruner, direction=direction, load_if_exists=True)
        saved = study.user_attrs.get("sweep")
        if saved is None:
            study.set_user_attr("sweep", sweep.signature())
        elif saved != json.loads(json.dumps(sweep.signature())):
            changed = [k for k in sweep.signature() if saved.get(k) != json.loads(
                json.dumps(sweep.signature()[k]))]
            raise ConfigError(
                f"{sweep.study_dir} holds study '{sweep.study_name}' of a different sweep "
                f"({', '.join(changed)} changed). Resume it with the sweep file it was started "
                f"with, or give another --study-dir.")
        if study.direction.name.lower() != direction:
            raise ConfigError(f"study '{sweep.study_name}' was created to "
                              f"{study.direction.name.lower()} the metric, not to {direction} "
                              f"it; give another --study-dir.")
        return study

    def _existing_trials(self) -> int:
        try:
            study_id = self.storage.get_study_id_from_name(self.sweep.study_name)
        except KeyError:
            return 0
        return len(self.storage.get_all_trials(study_id, deepcopy=False))

    def _sampler(self, existing: int) -> Any:
        samplers, sweep = self.optuna.samplers, self.sweep
        if sweep.strategy == "grid":  # the same seed on resume: it orders the grid
            return samplers.GridSampler(sweep.search_space, seed=sweep.seed)
        seed = sweep.seed + existing  # a resumed sweep does not replay its first samples
        if sweep.strategy == "random":
            return samplers.RandomSampler(seed=seed)
        startup = max(2, min(10, sweep.trials // 3))
        return samplers.TPESampler(seed=seed, n_startup_trials=startup)

    def recover(self, study: Any) -> int:
        """Mark trials left RUNNING by a killed sweep as FAIL (interrupted) and queue a re-run
        of every interrupted trial not re-run yet; returns how many were queued."""
        TrialState = self.optuna.trial.TrialState
        storage, study_id = self.storage, self.storage.get_study_id_from_name(study.study_name)
        trials = study.get_trials(deepcopy=False)
        for t in trials:
            if t.state == TrialState.RUNNING:
                trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
                storage.set_trial_user_attr(trial_id, "interrupted", True)
                storage.set_trial_user_attr(trial_id, "note", "interrupted: the sweep stopped")
                storage.set_trial_state_values(trial_id, TrialState.FAIL)
        trials = study.get_trials(deepcopy=False)
        retried = {t.user_attrs.get("retry_of") for t in trials}
        queued = 0
        for t in trials:
            if (t.state == TrialState.FAIL and t.user_attrs.get("interrupted")
                    and t.number not in retried):
                system = {k: v for k, v in t.system_attrs.items() if k != "fixed_params"}
                study.add_trial(self.optuna.trial.create_trial(
                    state=TrialState.WAITING, params=t.params, distributions=t.distributions,
                    user_attrs={"retry_of": t.number}, system_attrs=system))
                queued += 1
        return queued

    def remaining(self, study: Any) -> int:
        """Trials still to run: grid points with no finished run, or trials short of the
        target (interrupted ones do not count as run)."""
        done = [t for t in study.get_trials(deepcopy=False) if self._done(t)]
        if self.sweep.strategy == "grid":
            return self.sweep.grid_size - len({t.system_attrs.get("grid_id") for t in done})
        return self.sweep.trials - len(done)

    def _done(self, t: Any) -> bool:
        TrialState = self.optuna.trial.TrialState
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            return True
        return t.state == TrialState.FAIL and not t.user_attrs.get("interrupted")

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
        self.say(f"trial {trial.number} started: {shown}")
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

        for i, done in enumerate(finished):
            threading.Thread(target=work, args=(done,), name=f"sweep-{i}", daemon=True).start()

        def wait() -> None:
            # Event.wait, not Thread.join: a join cut short by Ctrl-C may report a live thread
            # as finished (CPython 3.11), and the report would then miss its trial
            while not all(done.is_set() for done in finished):
                for done in finished:
                    done.wait(0.2)

        interrupted = False
        try:
            wait()
        except KeyboardInterrupt:  # from interrupt(): the trial processes are being stopped
            interrupted = True
            self.stopping.set()
            self._stop_all()
            wait()
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
        if t.state.name == "COMPLETE":
            self.say(f"trial {t.number} complete: {self.sweep.metric} = {t.value:.6g} "
                     f"({_duration(t)})")
        else:
            self.say(f"trial {t.number} {t.state.name.lower()}: {note} ({_duration(t)})")


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


# --------------------------------------------------------------------------------- main
def _lock(study_dir: str) -> Any:
    """Hold STUDY_DIR/.lock for this process: one sweep per study at a time (trials left
    RUNNING are then surely stale)."""
    handle = open(os.path.join(study_dir, ".lock"), "a+")
    try:
        import fcntl
    except ImportError:  # Windows: no lock
        return handle
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise ConfigError(f"another sweep is running on {study_dir}; wait for it or give "
                          f"another --study-dir.") from None
    return handle


def run_sweep(path: str, parallel: int | None = None, trials: int | None = None,
              study_dir: str | None = None) -> int:
    """Run (or resume) the sweep of the sweep file ``path`` and report it.

    Args:
        path: The sweep file (.py, .yaml or .json).
        parallel: Trials running at once. Defaults to None: the file's ``parallel``, else 1.
        trials: Trials of a random or bayes sweep. Defaults to None: the file's ``trials``.
        study_dir: The study's folder. Defaults to None: the file's ``study_dir``, else
            ``work_dirs/sweeps/<study_name>``.

    Returns:
        0, or 130 when the sweep was interrupted (run it again to resume).

    Raises:
        ConfigError: A bad sweep file, or another sweep running on the study.
    """
    args = types.SimpleNamespace(parallel=parallel, trials=trials, study_dir=study_dir)
    sweep = Sweep(path, args)
    os.makedirs(sweep.study_dir, exist_ok=True)
    lock = _lock(sweep.study_dir)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the sweep prints its own lines
    runner = SweepRunner(sweep)
    study = runner.open_study()
    done = len(study.get_trials(deepcopy=False))
    queued = runner.recover(study)
    todo = runner.remaining(study)
    what = (f"grid of {sweep.grid_size}" if sweep.strategy == "grid"
            else f"{sweep.strategy}, {sweep.trials} trials")
    print(f"Sweep '{sweep.study_name}' ({what}) of {_show(sweep.config)}, "
          f"{'maximizing' if sweep.mode == 'max' else 'minimizing'} {sweep.metric}; "
          f"study in {_show(sweep.study_dir)}", flush=True)
    if done:
        print(f"Resuming: {done} trial(s) in the study"
              + (f", {queued} interrupted one(s) queued to run again" if queued else "")
              + f"; {max(todo, 0)} to run.", flush=True)
    status = 0
    if todo > 0:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in previous:
            signal.signal(sig, runner.interrupt)
        try:
            if runner.run_trials(study, todo):
                print("Sweep interrupted: run the same command to resume (the interrupted "
                      "trials run again).", file=sys.stderr)
                status = 130
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    else:
        print("Nothing to run: every trial of the sweep has finished.")
    report(study, sweep)
    lock.close()
    return status

