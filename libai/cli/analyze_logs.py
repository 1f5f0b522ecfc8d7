"""``libai analyze-logs`` (``python tools/analyze_logs.py``): curves, iteration times and a
summary of runs' ``scalars.jsonl`` logs. The logic is :mod:`libai.analysis`.

    libai analyze-logs plot_curve RUN [RUN ...] [--keys train/loss val/accuracy]
        [--x step|epoch] [--smooth N] [--log-scale] [--legend NAME ...] [--title T] --out FILE
    libai analyze-logs cal_train_time RUN [RUN ...]
    libai analyze-logs summary RUN [RUN ...]

A RUN is a ``scalars.jsonl`` or a work dir; of a work dir, the latest training: its newest run
folder that started a training and logged steps, with the resumes that continued it (a folder
without steps, e.g. of a refused ``--resume``, is passed over).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from libai.analysis import logs
from libai.analysis.logs import SCALARS

__all__ = ["build_parser", "main", "parse_args"]


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help=f"work dir or {SCALARS} file")
    p.add_argument("--debug", action="store_true", help="show full tracebacks")


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Analyze the scalars.jsonl logs of runs: curves, iteration times, summary.")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("plot_curve", help="draw curves of scalar keys, one per run")
    _add_common(p)
    p.add_argument("--keys", nargs="+", default=["train/loss"], metavar="KEY",
                   help="scalar keys, one subplot each (default: train/loss)")
    p.add_argument("--x", choices=("step", "epoch"), default="step",
                   help="x axis: train iterations or epochs (default: step)")
    p.add_argument("--smooth", type=int, default=1, metavar="N",
                   help="moving average over N logged points (default: 1, as logged)")
    p.add_argument("--log-scale", action="store_true", help="logarithmic y axes")
    p.add_argument("--legend", nargs="+", metavar="NAME", help="one name per run")
    p.add_argument("--title", help="figure title")
    p.add_argument("--out", required=True, help="output file: .png, .svg or .pdf")
    p = sub.add_parser("cal_train_time", help="average/slowest/fastest iteration time per run")
    _add_common(p)
    p = sub.add_parser("summary", help="best and last metric values of runs side by side")
    _add_common(p)
    return parser


def parse_args(argv: Iterable[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    return build_parser(prog).parse_args(list(argv) if argv is not None else None)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = parse_args(argv, prog)
    names = getattr(args, "legend", None)
    runs = logs.load_runs(args.runs, names)
    if args.command == "plot_curve":
        logs.plot_curve(runs, keys=args.keys, x=args.x, smooth=args.smooth,
                        log_scale=args.log_scale, title=args.title, out=args.out)
        print(f"Saved {args.out} ({len(args.keys)} key(s) x {len(runs)} run(s))")
    elif args.command == "cal_train_time":
        logs.print_table(logs.train_time_table(logs.cal_train_time(runs)), logs.TRAIN_TIME_NOTE)
    else:
        logs.print_table(logs.summary_table(logs.summary(runs)), logs.SUMMARY_NOTE)
    logs.print_notes(runs)  # after the output: an error stays one line
    return 0
