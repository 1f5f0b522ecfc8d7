"""Looking at runs without training: the scalar logs of runs (curves, iteration times, summaries),
the data as the model sees it (:mod:`libai.analysis.browse`) and a model's parameters and FLOPs
(:mod:`libai.analysis.model_summary`; not ``summary``, which is the summary of runs).

``import libai.analysis`` loads neither torch nor matplotlib: the log functions import what they
draw with when called, and ``browse`` and ``model_summary`` (which need torch) are submodules imported
by name.

>>> from libai.analysis import load_runs, plot_curve, summary
>>> runs = load_runs(["work_dirs/a", "work_dirs/b"])
>>> plot_curve(runs, keys=["train/loss"], out="curves.png")
"""

from .logs import (
    SUMMARY_NOTE,
    TRAIN_TIME_NOTE,
    LogError,
    Run,
    RunSummary,
    TrainTime,
    better_rule,
    cal_train_time,
    load_runs,
    plot_curve,
    print_notes,
    print_table,
    summary,
    summary_table,
    train_time_table,
)

__all__ = [
    "SUMMARY_NOTE",
    "TRAIN_TIME_NOTE",
    "LogError",
    "Run",
    "RunSummary",
    "TrainTime",
    "better_rule",
    "cal_train_time",
    "load_runs",
    "plot_curve",
    "print_notes",
    "print_table",
    "summary",
    "summary_table",
    "train_time_table",
]
