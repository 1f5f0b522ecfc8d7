"""Look at a config's data before training: sample items of one split, then plot them.

    python tools/browse_dataset.py CONFIG [--split train|val|test] [-n 16] [--out FILE]
        [--set NAME] [--seed S] [--cfg-options key=value ...] [--debug]

The same as ``libai browse ...``; from Python, :func:`libai.analysis.browse.browse`.
"""

from libai.analysis.browse import *  # noqa: F403  (the Python API, importable from here as before)
from libai.analysis.browse import browse, load_config, sample_split  # noqa: F401
from libai.cli.browse_dataset import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
