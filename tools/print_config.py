"""Print a config with its ``_base_`` files and command-line overrides merged.

python tools/print_config.py CONFIG [--cfg-options KEY=VALUE ...] [--debug]
"""

from __future__ import annotations

import argparse

from libai.config import Config, add_cfg_options_argument
from libai.utils.cli import run_cli


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Print the fully merged config.")
    parser.add_argument("config", help="config file (.py, .yaml, .yml, .json) or libai::<path>")
    add_cfg_options_argument(parser)
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = parser.parse_args(argv)

    cfg = Config.fromfile(args.config)
    cfg.merge_from_options(args.cfg_options)
    print(f"# {cfg.filename}")
    print(cfg.pretty_text, end="")
    return 0


if __name__ == "__main__":
    run_cli(main)
