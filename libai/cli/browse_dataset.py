"""``libai browse`` (``python tools/browse_dataset.py``): sample items of a config's data split
and draw them (:func:`libai.analysis.browse.browse`).

    libai browse CONFIG [--split train|val|test] [-n 16] [--out FILE]
        [--set NAME] [--seed S] [--cfg-options key=value ...] [--debug]
"""

from __future__ import annotations

import argparse

from libai.analysis.browse import SPLITS, browse
from libai.cli.configs import add_config_arguments, resolve_config

__all__ = ["main", "parse_args"]


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Sample items of a config's data split (after transforms) and plot them: "
                    "a PNG grid for images, an HTML table for text.")
    parser.add_argument("config", help="config file (.py, .yaml or .json) or libai::<path>")
    parser.add_argument("--split", default="train", choices=SPLITS, help="default: train")
    parser.add_argument("-n", "--num", type=int, default=16, help="samples to draw (default 16)")
    parser.add_argument("--out", help="output file (default: browse_<config>_<split>.png|.html)")
    parser.add_argument("--set", dest="set_name", metavar="NAME",
                        help="with several named validation/test sets: which (default: the first)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the sampler and transforms (default: the config's)")
    add_config_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = parse_args(argv, prog)
    browse(resolve_config(args.config), args.split, args.num, args.out, args.cfg_options, args.set_name, args.seed)
    return 0
