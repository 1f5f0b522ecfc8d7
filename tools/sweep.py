"""Hyper-parameter sweep: run tools/train.py once per trial, driven by an Optuna study.

    python tools/sweep.py SWEEP_FILE [--parallel N] [--trials N] [--study-dir DIR] [--debug]

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

The same as ``libai sweep ...``; from Python, :func:`libai.tuning.sweep.run_sweep`.
"""

from libai.cli.sweep import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
