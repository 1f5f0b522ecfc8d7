"""Hyper-parameter sweep: run tools/train.py once per trial, driven by an Optuna study.

    python tools/sweep.py SWEEP_FILE [--parallel N] [--trials N] [--study-dir DIR] [--debug]

The same as ``libai sweep ...``; from Python, :func:`libai.tuning.sweep.run_sweep`.
"""

from libai.cli.sweep import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
