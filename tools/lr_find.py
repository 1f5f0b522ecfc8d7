"""Learning-rate range test: train a few steps with an exponentially growing lr, plot the loss.

    python tools/lr_find.py CONFIG [--cfg-options key=value ...] [--start-lr 1e-7] [--end-lr 10]
        [--num-iters 100] [--diverge 4.0] [--smooth 0.05] [--out lr_find.png] [--amp] [--debug]

The same as ``libai lr-find ...``; from Python, :func:`libai.tuning.find_lr`.
"""

from libai.cli.lr_find import main, parse_args  # noqa: F401
from libai.tuning.lr_find import find_lr, lr_at, suggest  # noqa: F401  (the Python API)
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
