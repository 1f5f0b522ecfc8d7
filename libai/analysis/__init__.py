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

from .logs import *  # noqa: F403  (the log API: libai.analysis.logs lists its names once)
from .logs import __all__ as _LOG_API

__all__ = list(_LOG_API)
