"""Print a config with its ``_base_`` files and command-line overrides merged.

python tools/print_config.py CONFIG [--cfg-options KEY=VALUE ...] [--debug]

The same as ``libai print-config ...``; the command is :mod:`libai.cli.print_config`.
"""

from libai.cli.print_config import main  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
