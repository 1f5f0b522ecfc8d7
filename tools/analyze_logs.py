"""Analyze the scalar logs (``scalars.jsonl``) of one or more runs: curves, iteration times, a summary.

    python tools/analyze_logs.py plot_curve RUN [RUN ...] [--keys train/loss val/accuracy]
        [--x step|epoch] [--smooth N] [--log-scale] [--legend NAME ...] [--title T] --out FILE
    python tools/analyze_logs.py cal_train_time RUN [RUN ...]
    python tools/analyze_logs.py summary RUN [RUN ...]

The same as ``libai analyze-logs ...``; from Python, :mod:`libai.analysis` (``load_runs``,
``plot_curve``, ``cal_train_time``, ``summary``).
"""

from libai.analysis import (  # noqa: F401  (the Python API, importable from here as before)
    LogError,
    Run,
    RunSummary,
    TrainTime,
    better_rule,
    cal_train_time,
    load_runs,
    plot_curve,
    summary,
)
from libai.cli.analyze_logs import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
