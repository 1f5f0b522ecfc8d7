"""Evaluate a checkpoint on the test set (or predict and dump the outputs).

    python tools/test.py CONFIG CHECKPOINT [--dump preds.pt] [--work-dir DIR]
        [--cfg-options key=value ...] [--debug]

The same as ``libai test ...``; the command is :mod:`libai.cli.test`.
"""

from libai.cli.test import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli
from libai.utils.dist import destroy_dist

if __name__ == "__main__":
    run_cli(main, teardown=destroy_dist)  # once main has returned: the runner is released
