"""Hyper-parameter sweep: run ``libai train`` once per trial, driven by an Optuna study.

    libai sweep SWEEP_FILE [--parallel N] [--trials N] [--study-dir DIR]
        [--cfg-options KEY=VALUE ...] [--debug]

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
    cfg_options = ["train_cfg.max_iters=300"]   # fixed options of every trial (then --cfg-options)
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

While trials run, each running trial's step and metric (read from its ``scalars.jsonl``) and the
trials done: live bars on a terminal, a line per new value of the metric elsewhere
(:mod:`libai.tuning.sweep_progress`).

At the end: a table of the trials sorted by the metric, ``trials.csv``, ``best_config.py`` (the
config with the fixed options and the best trial's values merged in, work_dir
``STUDY_DIR/best``: ``python tools/train.py STUDY_DIR/best_config.py``) and Optuna's plots:
``optimization_history.png``, ``param_importances.png`` (fANOVA, from 2 complete trials) and
``intermediate_values.png`` (with a pruner).

From Python: :func:`run_sweep`; ``libai sweep`` and ``python tools/sweep.py`` parse its arguments.
The parts: the sweep file is read in :mod:`libai.tuning.sweep_file`, the study opened and resumed
in :mod:`libai.tuning.sweep_study`, the trials run in :mod:`libai.tuning.sweep_trials` and the
results reported in :mod:`libai.tuning.sweep_report`.
"""

from __future__ import annotations

import os
import signal
import sys
import types
from typing import Any

from libai.utils.errors import ConfigError

from .sweep_file import KEYS, STRATEGIES, Param, Sweep  # noqa: F401  (the sweep file's API)
from .sweep_report import _show, report
from .sweep_study import open_study, recover, remaining
from .sweep_trials import (  # noqa: F401  (importable from here as before)
    PRUNED_MARKER,
    STDERR_LINES,
    TRAIN,
    SweepRunner,
    read_metric,
)


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
              study_dir: str | None = None, cfg_options: list[str] | None = None) -> int:
    """Run (or resume) the sweep of the sweep file ``path`` and report it.

    Args:
        path: The sweep file (.py, .yaml or .json).
        parallel: Trials running at once. Defaults to None: the file's ``parallel``, else 1.
        trials: Trials of a random or bayes sweep. Defaults to None: the file's ``trials``.
        study_dir: The study's folder. Defaults to None: the file's ``study_dir``, else
            ``work_dirs/sweeps/<study_name>``.
        cfg_options: ``KEY=VALUE`` words for every trial's config, after the sweep file's
            ``cfg_options`` (``["train_cfg.max_iters=50"]`` shortens a sweep). Part of what a
            resumed study must agree on. Defaults to None.

    Returns:
        0, or 130 when the sweep was interrupted (run it again to resume).

    Raises:
        ConfigError: A bad sweep file, or another sweep running on the study.
    """
    args = types.SimpleNamespace(parallel=parallel, trials=trials, study_dir=study_dir,
                                 cfg_options=cfg_options)
    sweep = Sweep(path, args)
    os.makedirs(sweep.study_dir, exist_ok=True)
    lock = _lock(sweep.study_dir)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # the sweep prints its own lines
    runner = SweepRunner(sweep)
    study = open_study(sweep, runner.storage, runner.pruner)
    done = len(study.get_trials(deepcopy=False))
    queued = recover(study, runner.storage)
    todo = remaining(study, sweep)
    _announce(sweep, done, queued, todo)
    status = 0
    if todo > 0:
        status = _run_trials(runner, study, todo)
    else:
        print("Nothing to run: every trial of the sweep has finished.")
    report(study, sweep)
    lock.close()
    return status


def _announce(sweep: Sweep, done: int, queued: int, todo: int) -> None:
    """The sweep's first line, and what a resumed sweep has done and has left."""
    what = (f"grid of {sweep.grid_size}" if sweep.strategy == "grid"
            else f"{sweep.strategy}, {sweep.trials} trials")
    print(f"Sweep '{sweep.study_name}' ({what}) of {_show(sweep.config)}, "
          f"{'maximizing' if sweep.mode == 'max' else 'minimizing'} {sweep.metric}; "
          f"study in {_show(sweep.study_dir)}", flush=True)
    if done:
        print(f"Resuming: {done} trial(s) in the study"
              + (f", {queued} interrupted one(s) queued to run again" if queued else "")
              + f"; {max(todo, 0)} to run.", flush=True)


def _run_trials(runner: SweepRunner, study: Any, todo: int) -> int:
    """Run ``todo`` trials with SIGINT and SIGTERM stopping them; 130 when interrupted, else 0."""
    status = 0
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
    return status
