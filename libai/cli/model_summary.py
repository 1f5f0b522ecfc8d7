"""``libai summary`` (``python tools/model_summary.py``): a config's model table and the FLOPs
of one training step, without training (:func:`libai.analysis.model_summary.model_summary`).

    libai summary CONFIG [--cfg-options KEY=VALUE ...] [--depth N] [--no-flops]
        [--device cpu|cuda] [--debug]
"""

from __future__ import annotations

import argparse

from libai.cli.configs import load_config
from libai.config import add_cfg_options_argument

__all__ = ["build_parser", "main"]


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Print a config's model summary and the FLOPs of one training step.")
    parser.add_argument("config", help="config file (.py, .yaml, .yml, .json) or libai::<path>")
    add_cfg_options_argument(parser)
    parser.add_argument("--depth", type=int, default=1,
                        help="module levels in the table: 1 = top-level modules (default)")
    parser.add_argument("--no-flops", action="store_true",
                        help="the parameter table only: no data loader, no step")
    parser.add_argument("--device", default=None,
                        help="where the step runs: cpu, cuda, cuda:N (default: the config's "
                             "device, else CUDA when present)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = build_parser(prog).parse_args(argv)
    from libai.analysis.model_summary import model_summary
    from libai.model.summary import format_count, format_flops, format_summary

    cfg = load_config(args.config, args.cfg_options)
    summary, counted = model_summary(cfg, depth=args.depth, flops=not args.no_flops,
                                     device=args.device)
    print(format_summary(summary))
    if counted is None:
        return 0
    total, samples, tokens = counted["total"], counted["samples"], counted["tokens"]
    if not total:
        print("FLOPs per training step: unknown (FlopCounterMode counted no matrix product, "
              "convolution or attention)")
        return 0
    batch_text = f"{samples} samples" + (f", {tokens} tokens" if tokens else "") if samples \
        else "one batch"
    print(f"FLOPs per training step: {format_flops(total)} = forward "
          f"{format_flops(counted['forward'])} + backward {format_flops(counted['backward'])} "
          f"({batch_text} from train_dataloader; {total:,} FLOPs)")
    per = [f"{format_flops(total / samples)} per sample"] if samples else []
    per += [f"{format_flops(total / tokens)} per token"] if tokens else []
    if per:
        print(f"That is {', '.join(per)}; {format_count(summary.total_params)} parameters.")
    return 0
