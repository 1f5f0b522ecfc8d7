"""Memory and step time per process: DDP against FSDP2, FSDP2 + activation checkpointing and FSDP2
with ``rank0_init`` (only rank 0 builds the whole model; the others receive their part).

The model is BERT-base's shape (configs/bert_base.py: 12 layers, hidden 768, 110 M parameters),
trained with AdamW on synthetic batches of ``--batch`` sequences of ``--seq`` tokens per process.
Each strategy runs in its own ``torchrun`` launch of ``--nproc`` processes (gloo on the CPU, nccl
on GPUs), built by libai.parallel exactly as ``parallel=dict(...)`` builds it in a run.

Per process, it reports:

- **state**: bytes of parameters + gradients + optimizer state this process holds (the local
  shards under FSDP): the target is about 1/N of DDP's.
- **peak**: the process's peak memory: RSS on the CPU (``ru_maxrss``, which includes the Python
  interpreter and torch's libraries), ``torch.cuda.max_memory_allocated`` on a GPU; the largest
  over the processes.
- **start-up peak, ranks > 0**: the same, measured once the model is built and split, before the
  first step, on the processes other than rank 0: what ``rank0_init`` saves. (Whether it lowers
  the run's peak depends on which is larger: a whole fp32 model, 4 bytes per parameter, or what
  training holds per process, 16 / N bytes per parameter plus activations.)
- **step**: median seconds per training step after ``--warmup`` steps, and its ratio to DDP's
  measured in the same invocation (> 1: slower than DDP).

    python benchmarks/parallel.py [--nproc 2] [--steps 6] [--batch 2] [--seq 128]
        [--strategies ddp fsdp fsdp+ac fsdp+rank0_init] [--device cpu|cuda] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = {
    "ddp": (dict(), None),
    "fsdp": (dict(fsdp=-1), None),
    "fsdp+ac": (dict(fsdp=-1), "blocks"),
    "fsdp+rank0_init": (dict(fsdp=-1, rank0_init=True), None),
}


def worker(args: argparse.Namespace) -> None:
    """One process of one strategy (run by torchrun): train, measure, print a JSON line."""
    import resource

    import torch
    import torch.distributed as dist

    from libai.config import Config
    from libai.parallel import ParallelConfig, build_mesh, build_on_rank0, parallelize
    from libai.registry import MODELS

    device = torch.device("cpu")
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    world = dist.get_world_size()
    sizes, checkpointing = STRATEGIES[args.strategy]
    sizes = {k: world if v == -1 else v for k, v in sizes.items()}
    pc = ParallelConfig(world_size=world, data=world // sizes.get("fsdp", 1), **sizes)

    cfg = Config.fromfile(str(ROOT / "configs" / "bert_base.py"))
    torch.manual_seed(0)
    model = build_on_rank0(lambda: MODELS.build(cfg.model.to_dict()), pc)
    if not pc.rank0_init:
        model = model.to(device)
    dtype = getattr(torch, args.dtype) if args.dtype else None
    mesh = build_mesh(pc, device.type) if pc.fsdp > 1 else None
    model, _ = parallelize(model, pc, mesh, device, param_dtype=dtype,
                           activation_checkpointing=checkpointing)
    rss = (lambda: torch.cuda.max_memory_allocated(device) if device.type == "cuda"  # noqa: E731
           else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    startup = rss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(dist.get_rank())
    vocab = cfg.model.get("vocab_size", 30522)
    ids = torch.randint(1, vocab, (args.batch, args.seq), generator=g).to(device)
    batch = dict(input_ids=ids, token_type_ids=torch.zeros_like(ids),
                 attention_mask=torch.ones_like(ids), mlm_labels=ids.clone(),
                 next_sentence_label=torch.zeros(args.batch, dtype=torch.long, device=device))
    times = []
    for step in range(args.warmup + args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model(batch)
        loss = sum(v for k, v in out.items() if k.endswith("loss"))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)  # keep the gradients: they count in the state
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)

    def local_bytes(t: torch.Tensor) -> int:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()

    state = sum(local_bytes(p) + (local_bytes(p.grad) if p.grad is not None else 0)
                for p in model.parameters())
    state += sum(local_bytes(v) for s in opt.state.values() for v in s.values()
                 if isinstance(v, torch.Tensor))
    result = dict(rank=dist.get_rank(), state=state, peak=rss(), startup=startup,
                  step=statistics.median(times))
    print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


def launch(args: argparse.Namespace, strategy: str) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           str(args.nproc), __file__, "--worker", "--strategy", strategy, "--device", args.device,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
           "--seq", str(args.seq)] + (["--dtype", args.dtype] if args.dtype else [])
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONPATH=str(ROOT))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{strategy} failed:\n{out.stderr[-3000:]}")
    return [json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT ")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=2, help="sequences per process per step")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default=None, help="autocast dtype, e.g. bfloat16 (GPU)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--strategy", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    print(f"BERT-base shape, {args.nproc} processes, {args.batch} x {args.seq} tokens per "
          f"process, {args.device}{' ' + args.dtype if args.dtype else ''}")
    rows = {s: launch(args, s) for s in args.strategies}
    base = rows.get("ddp")
    mib = 1 << 20
    print(f"{'strategy':<16} {'state MiB':>10} {'x DDP':>7} {'peak MiB':>9} {'x DDP':>7} "
          f"{'start-up peak, ranks > 0':>25} {'x DDP':>7} {'step s':>8} {'x DDP':>7}")

    def ratio(value: float, key: str) -> float:
        return value / max(r[key] for r in base) if base else float("nan")

    for name, per_rank in rows.items():
        state = max(r["state"] for r in per_rank)
        peak = max(r["peak"] for r in per_rank)
        others = max((r["startup"] for r in per_rank if r["rank"] > 0), default=float("nan"))
        step = max(r["step"] for r in per_rank)
        print(f"{name:<16} {state / mib:>10.1f} {ratio(state, 'state'):>7.2f} {peak / mib:>9.1f} "
              f"{ratio(peak, 'peak'):>7.2f} {others / mib:>25.1f} {ratio(others, 'startup'):>7.2f} "
              f"{step:>8.3f} {ratio(step, 'step'):>7.2f}")


if __name__ == "__main__":
    main()
