"""Graph mode's cold compile: the whole model in one graph (``compile=dict(regions=False)``, the
way before issue 37) against its blocks compiled once per class (regional compilation, the
default), in the same run.

Models: the tiny transformers (``configs/gpt2_tiny.py``, ``configs/bert_tiny.py``), built from
their configs with their batch size and sequence length, on synthetic batches of those shapes
(``benchmarks/graph_mode.py``'s ``build``). Each way runs in a fresh process with an empty inductor
cache folder and inductor's FX-graph and AOTAutograd caches off, so every compile is cold; each
process trains ``--steps`` steps as ``tools/train.py --graph`` does (GraphModule, GraphOptimWrapper
with its compiled AdamW update, clipping as the config says; the parity check off: it is not
compile time).

Printed per model and way: the first step (everything compiled: forward, backward, update), the
update's compile alone (the same work both ways), the model's share (first step minus update),
the ratios regional / whole of the two, and the largest relative difference between the two
ways' losses, step by step.

    python benchmarks/compile_time.py [--models gpt bert] [--steps 3] [--rounds 1]
        [--threads 2] [--backend inductor]
    python benchmarks/compile_time.py --quick   # gpt only, aot_eager, 2 steps: the suite's run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("whole", "regions")


def child(name: str, regions: bool, args: argparse.Namespace) -> dict:
    """In this process: ``args.steps`` graph-mode steps, the first one compiling."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from graph_mode import build

    from libai.model import make_train_step
    from libai.model.blocks import find_blocks
    from libai.model.graph import GraphModule
    from libai.optim import GraphOptimWrapper

    torch.set_num_threads(args.threads)
    model, wrapper_cfg, batch = build(name, "cpu")
    opt_cfg = dict(wrapper_cfg["optimizer"])
    opt_cfg.pop("type", None)
    optimizer = torch.optim.AdamW(model.parameters(), **opt_cfg)
    wrapper = GraphOptimWrapper(optimizer, clip_grad=wrapper_cfg.get("clip_grad"), verify_steps=0,
                                compile=dict(backend=args.backend))
    blocks = find_blocks(model, None) if regions else None  # what libai.runner.distribute does
    forward = GraphModule(model, compile=wrapper.compile_options, on_failure="raise",
                          blocks=blocks)
    wrapper.bind_model(forward)
    wrapper.initialize_count_status(model, 0, 10**9)
    step = make_train_step(model, forward, torch.device("cpu"))
    losses, first = [], 0.0
    for _ in range(args.steps):
        start = time.perf_counter()
        losses.append(float(step(batch, wrapper)["loss"]))
        first = first or time.perf_counter() - start
    graph = forward.graph_mode
    if graph.eager:
        raise SystemExit(f"{name}: graph mode fell back to eager: {graph.failure}")
    return dict(first_s=first, update_s=graph.update_seconds, losses=losses,
                blocks=len(blocks or []))


def spawn(name: str, way: str, args: argparse.Namespace) -> dict:
    """``child`` in a fresh process with an empty inductor cache: a cold compile."""
    cmd = [sys.executable, __file__, "--child", name, way, "--steps", str(args.steps),
           "--threads", str(args.threads), "--backend", args.backend]
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_FX_GRAPH_CACHE="0",
                   TORCHINDUCTOR_AUTOGRAD_CACHE="0", PYTHONPATH=str(ROOT))
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name} ({way}): the child process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def max_relative(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=["gpt", "bert"], default=["gpt", "bert"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1,
                        help="cold runs per model and way, alternating; the medians are shown")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--quick", action="store_true",
                        help="gpt only, backend aot_eager, 2 steps (the test suite's run)")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.models, args.backend, args.steps, args.rounds = ["gpt"], "aot_eager", 2, 1
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1] == "regions", args)))
        return
    import torch

    print(f"torch {torch.__version__}, CPU, {args.threads} thread(s), float32, backend "
          f"{args.backend}; a fresh process and an empty compile cache per run; {args.rounds} "
          f"round(s), {args.steps} steps each; whole = compile=dict(regions=False)")
    print(f"{'model':<7}{'way':<9}{'blocks':>7}{'first step s':>14}{'update s':>10}"
          f"{'model s':>9}{'first step ratio':>18}{'model ratio':>13}{'loss rel. diff':>16}")
    for name in args.models:
        runs: dict[str, list[dict]] = {way: [] for way in WAYS}
        for r in range(args.rounds):
            for way in (WAYS if r % 2 == 0 else WAYS[::-1]):
                runs[way].append(spawn(name, way, args))
        median = {way: {key: statistics.median(run[key] for run in runs[way])
                        for key in ("first_s", "update_s")} for way in WAYS}
        for m in median.values():
            m["model_s"] = m["first_s"] - m["update_s"]
        diff = max(max_relative(r["losses"], w["losses"])
                   for r, w in zip(runs["regions"], runs["whole"]))
        for way in WAYS:
            m, base = median[way], median["whole"]
            ratios = (f"{m['first_s'] / base['first_s']:>18.2f}{m['model_s'] / base['model_s']:>13.2f}"
                      + (f"{diff:>16.1e}" if way == "regions" else f"{'(baseline)':>16}"))
            print(f"{name:<7}{way:<9}{runs[way][0]['blocks']:>7}{m['first_s']:>14.1f}"
                  f"{m['update_s']:>10.1f}{m['model_s']:>9.1f}{ratios}")


if __name__ == "__main__":
    main()
