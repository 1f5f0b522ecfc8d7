"""Print a config with its ``_base_`` files and command-line overrides merged.

libai print-config CONFIG [--cfg-options KEY=VALUE ...] [--debug]

The same as ``python tools/print_config.py`` in a checkout.
"""

from __future__ import annotations

import argparse

from libai.cli.configs import load_config
from libai.config import add_cfg_options_argument


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog, description="Print the fully merged config.")
    parser.add_argument("config", help="config file (.py, .yaml, .yml, .json) or libai::<path>")
    add_cfg_options_argument(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = parser.parse_args(argv)

    cfg = load_config(args.config, args.cfg_options)
    print(f"# {cfg.filename}")
    print(cfg.pretty_text, end="")
    return 0

