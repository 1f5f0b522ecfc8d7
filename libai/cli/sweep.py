"""``libai sweep`` (``python tools/sweep.py``): a hyper-parameter sweep with Optuna, one
``libai train`` process per trial (:func:`libai.tuning.sweep.run_sweep`; the sweep file's format
is described there).

    libai sweep SWEEP_FILE [--parallel N] [--trials N] [--study-dir DIR]
        [--cfg-options KEY=VALUE ...] [--debug]

SWEEP_FILE may name a shipped sweep: ``libai sweep sweeps/digits_lr``.
"""

from __future__ import annotations

import argparse

from libai.cli.configs import resolve_config
from libai.config import add_cfg_options_argument

__all__ = ["main", "parse_args"]


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Hyper-parameter sweep over tools/train.py runs (Optuna).")
    parser.add_argument("sweep", help="sweep file (.py, .yaml or .json)")
    parser.add_argument("--parallel", type=int, default=None, metavar="N",
                        help="trials running at once (default: the file's parallel, else 1)")
    parser.add_argument("--trials", type=int, default=None, metavar="N",
                        help="number of trials for random / bayes (overrides the file); for a "
                             "grid, run its first N points")
    parser.add_argument("--study-dir", default=None, metavar="DIR",
                        help="folder of the study (default work_dirs/sweeps/<study_name>)")
    options = add_cfg_options_argument(parser)
    options.help = ("options for every trial's config, applied after the sweep file's "
                    "cfg_options, e.g. train_cfg.max_iters=50 to shorten each trial "
                    "(as tools/train.py takes them)")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = parse_args(argv, prog)
    from libai.tuning.lr_find import option_words
    from libai.tuning.sweep import run_sweep

    return run_sweep(resolve_config(args.sweep), parallel=args.parallel, trials=args.trials,
                     study_dir=args.study_dir, cfg_options=option_words(args.cfg_options))
