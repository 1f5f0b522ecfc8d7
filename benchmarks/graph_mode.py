"""Graph mode (GraphOptimWrapper) against eager: training step time and compile time.

Models: the digits MLP (``configs/digits_mlp.py``) and the tiny transformers
(``configs/bert_tiny.py``, ``configs/gpt2_tiny.py``), built from their configs with their batch
size and sequence length, on synthetic batches of those shapes. Each step is what
``tools/train.py`` runs: forward with the loss, backward, AdamW (+ clipping where the config
clips), an lr set every step.

- **Step time**: eager and graph alternate, ``--rounds`` rounds of ``--steps`` steps each after a
  warm-up; the ratio eager/graph per round and its median (> 1: graph is faster).
- **Compile time**: the first graph-mode step (forward, backward and update compiled) in a fresh
  process, once with an empty inductor cache (cold) and once more with the cache it left (warm).

Each model runs in its own child processes (a compile cache is per process and per folder).

    python benchmarks/graph_mode.py [--models digits bert gpt] [--rounds 5] [--steps 20]
        [--threads 2] [--device cpu|cuda] [--dtype bfloat16] [--mode reduce-overhead]

On this CPU graph mode is expected to be slower than eager and its compile takes seconds; its
speed-up is a GPU matter, where ``--device cuda --dtype bfloat16`` measures it.
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
CONFIGS = {"digits": "digits_mlp.py", "bert": "bert_tiny.py", "gpt": "gpt2_tiny.py"}


def build(name: str, device: str):
    """The model of the config, its optimizer settings, and one synthetic batch of its shapes."""
    import torch

    from libai.config import Config
    from libai.registry import MODELS

    cfg = Config.fromfile(str(ROOT / "configs" / CONFIGS[name]))
    torch.manual_seed(0)
    model = MODELS.build(cfg.model.to_dict()).to(device)
    loader = cfg.train_dataloader
    batch_size = loader.batch_size
    g = torch.Generator().manual_seed(0)
    if name == "digits":
        batch = dict(inputs=torch.randn(batch_size, 64, generator=g),
                     labels=torch.randint(0, 10, (batch_size,), generator=g))
    else:
        vocab, seq = model.vocab_size, model.max_position_embeddings
        ids = torch.randint(1, vocab, (batch_size, seq + 1), generator=g)
        if name == "gpt":
            batch = dict(input_ids=ids[:, :-1], labels=ids[:, 1:])
        else:
            predictions = loader.dataset.get("max_predictions_per_seq", 20)
            batch = dict(input_ids=ids[:, :-1], attention_mask=torch.ones(batch_size, seq, dtype=torch.long),
                         token_type_ids=(torch.arange(seq) >= seq // 2).long().expand(batch_size, seq),
                         mlm_positions=torch.stack([torch.randperm(seq, generator=g)[:predictions]
                                                    for _ in range(batch_size)]),
                         mlm_labels=torch.randint(1, vocab, (batch_size, predictions), generator=g),
                         next_sentence_label=torch.randint(0, 2, (batch_size,), generator=g))
    batch = {k: v.to(device) for k, v in batch.items()}
    wrapper_cfg = cfg.optim_wrapper.to_dict()
    return model, wrapper_cfg, batch


def stepper(name: str, graph: bool, args: argparse.Namespace):
    """``run(n) -> seconds per step`` for eager or graph mode, and the first step's seconds."""
    import torch

    from libai.model import make_train_step
    from libai.model.graph import GraphModule
    from libai.optim import AmpOptimWrapper, GraphOptimWrapper, OptimWrapper

    model, wrapper_cfg, batch = build(name, args.device)
    opt_cfg = dict(wrapper_cfg["optimizer"])
    opt_cfg.pop("type", None)
    optimizer = torch.optim.AdamW(model.parameters(), **opt_cfg)
    clip = wrapper_cfg.get("clip_grad")
    if graph:
        compile_cfg = {"mode": args.mode} if args.mode else None
        wrapper = GraphOptimWrapper(optimizer, dtype=args.dtype, clip_grad=clip, verify_steps=0,
                                    compile=compile_cfg)
        forward = GraphModule(model, compile=wrapper.compile_options, on_failure="raise")
        wrapper.bind_model(forward)
    else:
        forward = model
        wrapper = (AmpOptimWrapper(optimizer, dtype=args.dtype, clip_grad=clip) if args.dtype
                   else OptimWrapper(optimizer, clip_grad=clip))
    wrapper.initialize_count_status(model, 0, 10**9)
    step = make_train_step(model, forward, torch.device(args.device))
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    lr = [1e-3]

    def run(n: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(n):
            lr[0] *= 0.999  # a scheduler's new value every step
            for group in wrapper.param_groups:
                if isinstance(group["lr"], torch.Tensor):
                    group["lr"].fill_(lr[0])
                else:
                    group["lr"] = lr[0]
            step(batch, wrapper)
        sync()
        return (time.perf_counter() - start) / n

    first = run(1)
    return run, first


def child(name: str, args: argparse.Namespace) -> dict:
    """In this process: the first graph step (compile), then eager vs graph interleaved."""
    import torch

    torch.set_num_threads(args.threads)
    graph_run, first = stepper(name, True, args)
    result = {"first_step_s": first}
    if args.compile_only:
        return result
    eager_run, _ = stepper(name, False, args)
    for run in (eager_run, graph_run):
        run(args.steps)  # warm-up
    ratios, eager_t, graph_t = [], [], []
    for r in range(args.rounds):
        order = (eager_run, graph_run) if r % 2 == 0 else (graph_run, eager_run)
        times = {id(run): run(args.steps) for run in order}
        eager_t.append(times[id(eager_run)])
        graph_t.append(times[id(graph_run)])
        ratios.append(eager_t[-1] / graph_t[-1])
    return result | {"eager_ms": 1e3 * statistics.median(eager_t),
                     "graph_ms": 1e3 * statistics.median(graph_t), "ratios": sorted(ratios)}


def spawn(name: str, args: argparse.Namespace, cache: str, compile_only: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", name, "--rounds", str(args.rounds), "--steps",
           str(args.steps), "--threads", str(args.threads), "--device", args.device]
    cmd += ["--dtype", args.dtype] if args.dtype else []
    cmd += ["--mode", args.mode] if args.mode else []
    cmd += ["--compile-only"] if compile_only else []
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name}: the child process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(CONFIGS), default=["digits", "bert", "gpt"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=["bfloat16", "float16"], default=None)
    parser.add_argument("--mode", default=None, help="torch.compile mode, e.g. reduce-overhead")
    parser.add_argument("--child", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--compile-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    import torch

    print(f"torch {torch.__version__}, device {args.device}, {args.threads} thread(s), "
          f"dtype {args.dtype or 'float32'}, mode {args.mode or 'default'}; "
          f"{args.rounds} rounds x {args.steps} steps, eager and graph alternating")
    print(f"{'model':<8}{'eager ms':>10}{'graph ms':>10}{'eager/graph':>13}{'range':>15}"
          f"{'compile cold s':>16}{'warm s':>8}")
    for name in args.models:
        with tempfile.TemporaryDirectory() as cache:
            cold = spawn(name, args, cache, compile_only=True)
            warm = spawn(name, args, cache, compile_only=False)
        ratios = warm["ratios"]
        print(f"{name:<8}{warm['eager_ms']:>10.2f}{warm['graph_ms']:>10.2f}"
              f"{statistics.median(ratios):>13.2f}{ratios[0]:>8.2f}-{ratios[-1]:<6.2f}"
              f"{cold['first_step_s']:>16.1f}{warm['first_step_s']:>8.1f}")


if __name__ == "__main__":
    main()
