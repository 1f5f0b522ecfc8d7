"""Read the scalar logs (``scalars.jsonl``) of one or more runs: curves, iteration times, a summary.

    libai analyze-logs plot_curve RUN [RUN ...] [--keys train/loss val/accuracy]
        [--x step|epoch] [--smooth N] [--log-scale] [--legend NAME ...] [--title T] --out FILE
    libai analyze-logs cal_train_time RUN [RUN ...]
    libai analyze-logs summary RUN [RUN ...]

(or ``python tools/analyze_logs.py ...``; the command line is :mod:`libai.cli.analyze_logs`.)

A RUN is a work dir (``work_dirs/digits_mlp``) or one ``scalars.jsonl`` file. In a work dir,
each run has a timestamped run folder, ``WORK_DIR/<YYYYmmdd_HHMMSS>/``: a fresh training writes its
training, validation and test scalars into its own folder's ``scalars.jsonl``, a resumed training
continues that file, and ``tools/test.py`` writes into its own folder. Given a work dir, the tool
reads the newest training (the newest fresh, not resumed, training run, found from the run
folders' logs) and the run folders after it, oldest first; older runs are left out with a note
(pass their ``scalars.jsonl`` to read one of them). Where two files give the same key at the same
step, the newer wins. Work dirs of older libai versions (``WORK_DIR/scalars.jsonl``) read too.

From Python (run names default to the work dir's name)::

    from libai.analysis import cal_train_time, load_runs, plot_curve, summary
    runs = load_runs(["work_dirs/a", "work_dirs/b"])
    fig = plot_curve(runs, keys=["train/loss", "val/accuracy"], out="curves.png")
    times = cal_train_time(runs)        # {name: TrainTime}
    table = summary(runs)               # {name: RunSummary}

Bad input (a missing path, a folder without ``scalars.jsonl``, an unknown key) is one line,
``error: ...``, and exit status 2; ``--debug`` shows the traceback.

This module computes the numbers (:func:`cal_train_time`, :func:`summary`) and gives every name
of the log API; reading runs is :mod:`libai.analysis.logs_read`, the curves
:mod:`libai.analysis.logs_plot` and the printed tables :mod:`libai.analysis.logs_tables`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

from .logs_plot import FORMATS, plot_curve  # noqa: F401  (FORMATS: importable from here as before)
from .logs_read import (  # noqa: F401  (SCALARS, Series: importable from here as before)
    SCALARS,
    LogError,
    MetricSummary,
    Run,
    RunSummary,
    Series,
    TrainTime,
    as_runs,
    load_runs,
)
from .logs_tables import (
    SUMMARY_NOTE,
    TRAIN_TIME_NOTE,
    print_notes,
    print_table,
    summary_table,
    train_time_table,
)

__all__ = [
    "LogError",
    "Run",
    "RunSummary",
    "TrainTime",
    "better_rule",
    "cal_train_time",
    "load_runs",
    "print_notes",
    "print_table",
    "summary_table",
    "train_time_table",
    "SUMMARY_NOTE",
    "TRAIN_TIME_NOTE",
    "plot_curve",
    "summary",
]

# Which direction is better, by the lower-cased last part of the key: the words that
# CheckpointHook(save_best='auto') and EarlyStoppingHook use; "lower" is tried first, so that
# "top1_error" is an error. tests/tools/test_analyze_logs.py checks that the two agree.
_LOWER_WORDS = ("loss", "error", "err", "perplexity", "ppl", "mse", "mae", "rmse", "nll", "wer",
                "cer")
_HIGHER_WORDS = ("acc", "precision", "recall", "f1", "map", "auc", "iou", "dice", "bleu", "rouge",
                 "top", "psnr", "ssim", "score", "r2")


# -------------------------------------------------------------------------------- cal_train_time
def _train_time(run: Run) -> TrainTime:
    steps, times = run.require("train/time")
    data = dict(zip(*run.series["train/data_time"])) if "train/data_time" in run.series else {}
    total = data_total = 0.0
    prev = 0
    covered = []
    for step, t in zip(steps, times):
        n = max(step - prev, 0)
        prev = step
        covered.append(n)
        total += t * n
        if step in data:
            data_total += data[step] * n
    iterations = sum(covered)
    slow = max(range(len(times)), key=lambda i: times[i])
    fast = min(range(len(times)), key=lambda i: times[i])
    has_data = bool(data) and all(s in data for s in steps)
    return TrainTime(
        iterations=iterations,
        mean=total / iterations if iterations else float("nan"),
        slowest=times[slow], slowest_step=steps[slow],
        fastest=times[fast], fastest_step=steps[fast],
        data_time_share=data_total / total if has_data and total > 0 else None,
        total=total,
    )


def cal_train_time(runs: Sequence[Run | str | os.PathLike]) -> dict[str, TrainTime]:
    """Per run, the average, slowest and fastest iteration time and the data time share.

    From the ``train/time`` and ``train/data_time`` rows: each is the mean over one log
    interval, and covers the iterations since the previous row (the step difference). So the
    average is weighted by those iterations, and slowest/fastest are the slowest and fastest
    logged intervals (the first includes the warm-up).

    Returns:
        ``{run name: TrainTime}``, in the order of ``runs``.

    Raises:
        LogError: A run has no ``train/time`` (the IterTimerHook was removed?).
    """
    return {run.name: _train_time(run) for run in as_runs(runs)}


# ---------------------------------------------------------------------------------- summary
def better_rule(key: str) -> str | None:
    """``'min'`` for loss-like keys (loss, error, perplexity, ...), ``'max'`` for accuracy-like
    ones (acc, precision, f1, bleu, ...), None if the name says neither: the words of
    ``CheckpointHook(save_best='auto')``, matched in the lower-cased last part of the key."""
    leaf = key.rsplit("/", 1)[-1].lower()
    if any(w in leaf for w in _LOWER_WORDS):
        return "min"
    if any(w in leaf for w in _HIGHER_WORDS):
        return "max"
    return None


def summary_keys(run: Run) -> list[str]:
    """The keys a summary shows: validation and test metrics, and ``train/loss``."""
    return sorted(k for k in run.series
                  if k.startswith(("val/", "test/")) or k == "train/loss")


def _metric(steps: list[int], values: list[float], rule: str | None) -> MetricSummary:
    best = best_step = None
    finite = [(v, s) for s, v in zip(steps, values) if math.isfinite(v)]
    if rule and finite:
        # the first step that reaches the best value
        pick = max if rule == "max" else min
        best = pick(v for v, _ in finite)
        best_step = next(s for v, s in finite if v == best)
    return MetricSummary(best=best, best_step=best_step, last=values[-1], last_step=steps[-1],
                         rule=rule)


def summary(runs: Sequence[Run | str | os.PathLike]) -> dict[str, RunSummary]:
    """Per run, the best and the last value of each metric (see :func:`summary_keys`), the
    iterations run and the time of those iterations (:attr:`TrainTime.total`).

    Best is the largest value for accuracy-like keys and the smallest for loss-like ones (see
    :func:`better_rule`); a key whose name says neither has no best. Non-finite values are
    never best.

    Returns:
        ``{run name: RunSummary}``, in the order of ``runs``.
    """
    out = {}
    for run in as_runs(runs):
        metrics = {k: _metric(*run.series[k], better_rule(k)) for k in summary_keys(run)}
        time = _train_time(run).total if "train/time" in run.series else None
        out[run.name] = RunSummary(metrics=metrics, iterations=run.last_step(), train_time=time)
    return out
