"""``libai lr-find`` (``python tools/lr_find.py``): the learning-rate range test of
:func:`libai.tuning.find_lr`, printed as a train command
that sets it (``--cfg-options optim_wrapper.optimizer.lr=...``).

    libai lr-find CONFIG [--cfg-options key=value ...] [--start-lr 1e-7] [--end-lr 10]
        [--num-iters 100] [--diverge 4.0] [--smooth 0.05] [--out lr_find.png] [--amp] [--debug]
"""

from __future__ import annotations

import argparse
import shlex

from libai.cli.configs import load_config
from libai.config import add_cfg_options_argument
from libai.tuning.lr_find import LR_KEY, find_lr, option_words

__all__ = ["main", "parse_args"]


def parse_args(argv: list[str] | None = None, prog: str | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="LR range test: loss against an exponentially growing learning rate.")
    parser.add_argument("config", help="config file (.py, .yaml or .json) or libai::<path>")
    add_cfg_options_argument(parser)
    parser.add_argument("--start-lr", type=float, default=1e-7, help="first lr (default 1e-7)")
    parser.add_argument("--end-lr", type=float, default=10.0, help="last lr (default 10)")
    parser.add_argument("--num-iters", type=int, default=100,
                        help="optimizer steps at most (default 100)")
    parser.add_argument("--diverge", type=float, default=4.0,
                        help="stop when the smoothed loss exceeds this many times the best "
                             "(default 4.0)")
    parser.add_argument("--smooth", type=float, default=0.05,
                        help="weight of the newest loss in the moving average, in (0, 1] "
                             "(default 0.05; 1 = no smoothing)")
    parser.add_argument("--out", default="lr_find.png", help="plot file (default lr_find.png)")
    parser.add_argument("--amp", action="store_true",
                        help="mixed precision, as tools/train.py --amp")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = parse_args(argv, prog)
    cfg = load_config(args.config, args.cfg_options)
    result = find_lr(cfg, start_lr=args.start_lr, end_lr=args.end_lr, num_iters=args.num_iters,
                     diverge=args.diverge, smooth=args.smooth, out=args.out, amp=args.amp)
    lr, lr_key, lowest = result["lr"], result["lr_key"], result["lowest"]
    print(f"Stopped: {result['stop']}.")
    print(f"Suggested lr {lr:.1e}: steepest descent of the smoothed loss "
          f"(lowest smoothed loss {result['smoothed'][lowest]:.4g} at lr "
          f"{result['lrs'][lowest]:.1e}; a tenth of that is {result['lrs'][lowest] / 10:.1e}).")
    print(f"Plot: {args.out}")
    print("Train with it:")
    kept = {k: v for k, v in (args.cfg_options or {}).items() if k.lstrip("+") != LR_KEY}
    words = ["python", "tools/train.py", args.config, *(["--amp"] if args.amp else []),
             "--cfg-options", *option_words(kept), f"{lr_key}={lr:.1e}"]
    print("  " + " ".join(shlex.quote(w) for w in words))  # the flag once, in the command
    return 0
