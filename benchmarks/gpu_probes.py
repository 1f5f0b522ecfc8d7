"""The measurements of ``benchmarks/gpu.py`` that are not a ``tools/train.py`` run, each a process
of its own that prints one JSON line (the driver reads the last one):

    python benchmarks/gpu_probes.py matmul --n 8192 --device cuda
    python benchmarks/gpu_probes.py transformers --micro 8 --accum 32 --seq 512 --iters 96
    python benchmarks/gpu_probes.py sdpa configs/bert_large.py --work-dir DIR --cfg-options ...

- ``matmul``: the chip's bf16 matrix rate, TFLOP/s of a timed ``n x n x n`` product (the limit
  MFU is read against beside the table's peak).
- ``transformers``: the peer, Hugging Face ``BertForPreTraining`` built from a ``BertConfig``
  (nothing downloaded) at BERT-large's shape (``--tiny``: a 1-layer, 64-wide one), bf16 autocast,
  AdamW fused on CUDA (foreach elsewhere), random tokens with BERT's 80 masked positions per 512,
  ``--accum`` micro-batches per optimizer step; tokens/s over the iterations after the first
  optimizer step, peak memory (``torch.cuda.max_memory_allocated``, MiB).
- ``sdpa``: which ``scaled_dot_product_attention`` kernel the config's bf16 training step runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # libai from this checkout


def sdpa_kernel(ops: list[str]) -> str:
    """The SDPA implementation named by the profiler's op names (forward and backward)."""
    kinds = [("cudnn_attention", "cudnn"), ("flash_attention_for_cpu", "flash (CPU)"),
             ("flash_attention", "flash"), ("efficient_attention", "memory-efficient"),
             ("attention_math", "math")]
    found = [next((label for key, label in kinds if key in op), None) for op in ops]
    return " + ".join(dict.fromkeys(f for f in found if f)) or "none found"


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul(argv: list[str]) -> dict[str, Any]:
    import torch

    parser = argparse.ArgumentParser(prog="gpu_probes.py matmul")
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    a, b = (torch.randn(args.n, args.n, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):  # the kernel chosen and loaded
        a @ b
    _sync(device)
    start = time.perf_counter()
    for _ in range(args.iters):
        a @ b
    _sync(device)
    seconds = time.perf_counter() - start
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return dict(device=name, n=args.n, iters=args.iters,
                tflops=2 * args.n**3 * args.iters / seconds / 1e12)


def transformers_peer(argv: list[str]) -> dict[str, Any]:
    import torch
    import transformers
    from transformers import BertConfig, BertForPreTraining

    parser = argparse.ArgumentParser(prog="gpu_probes.py transformers")
    for key, default in (("micro", 8), ("accum", 32), ("seq", 512), ("iters", 96)):
        parser.add_argument(f"--{key}", type=int, default=default)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="1 layer of width 64, vocab 8192")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    shape = (dict(vocab_size=8192, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=128) if args.tiny else
             dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24,
                  num_attention_heads=16, intermediate_size=4096))
    config = BertConfig(**shape, max_position_embeddings=max(512, args.seq),
                        attn_implementation="sdpa")
    torch.manual_seed(0)
    model = BertForPreTraining(config).to(device).train()
    fused = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01,
                                  **(dict(fused=True) if fused else dict(foreach=True)))
    g = torch.Generator().manual_seed(0)
    masked = max(1, round(args.seq * 80 / 512))  # BERT's 80 predictions per 512 tokens

    def batch() -> dict[str, Any]:
        ids = torch.randint(0, config.vocab_size, (args.micro, args.seq), generator=g)
        labels = torch.full_like(ids, -100)
        pos = torch.rand(args.micro, args.seq, generator=g).argsort(dim=1)[:, :masked]
        labels.scatter_(1, pos, ids.gather(1, pos))
        types = (torch.arange(args.seq) >= args.seq // 2).long().expand(args.micro, -1)
        out = dict(input_ids=ids, token_type_ids=types, attention_mask=torch.ones_like(ids),
                   labels=labels, next_sentence_label=torch.randint(0, 2, (args.micro,),
                                                                    generator=g))
        return {k: v.to(device, non_blocking=True) for k, v in out.items()}

    batches = [batch() for _ in range(min(args.accum, 4))]  # no data loading in the timing
    loss = torch.zeros((), device=device)

    def iteration(i: int) -> None:
        nonlocal loss
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(**batches[i % len(batches)]).loss
        (loss / args.accum).backward()
        if (i + 1) % args.accum == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    warm = args.accum if args.iters > args.accum else 0  # the first optimizer step: warm-up
    for i in range(warm):
        iteration(i)
    _sync(device)
    start = time.perf_counter()
    for i in range(warm, args.iters):
        iteration(i)
    _sync(device)
    seconds = time.perf_counter() - start
    timed = args.iters - warm
    memory = torch.cuda.max_memory_allocated(device) / 2**20 if fused else None
    return dict(transformers=transformers.__version__, fused_adamw=fused,
                tokens_per_s=timed * args.micro * args.seq / seconds,
                iteration_ms=1e3 * seconds / timed, peak_memory_mib=memory,
                loss=float(loss.detach()), micro=args.micro, accum=args.accum, seq=args.seq)


def sdpa(argv: list[str]) -> dict[str, Any]:
    """One bf16 training step of the config's model as the runner takes it (AmpOptimWrapper,
    ``make_train_step``, a batch of the train loader) under the profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from libai.config import Config, add_cfg_options_argument
    from libai.data import build_dataloader
    from libai.model import make_train_step
    from libai.optim import AmpOptimWrapper
    from libai.registry import MODELS

    parser = argparse.ArgumentParser(prog="gpu_probes.py sdpa")
    parser.add_argument("config")
    parser.add_argument("--work-dir", required=True)
    add_cfg_options_argument(parser)
    args = parser.parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg.merge_from_options(args.cfg_options or {})
    device = torch.device(cfg.get("device") or "cuda")
    torch.manual_seed(0)
    model = MODELS.build(cfg.model.to_dict()).to(device).train()
    loader = dict(cfg.train_dataloader.to_dict(), num_workers=0)
    for key in ("persistent_workers", "pin_memory"):
        loader.pop(key, None)
    batch = next(iter(build_dataloader(loader, seed=0)))
    wrapper = AmpOptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-4), dtype="bfloat16")
    wrapper.initialize_count_status(model, 0, 2)
    step = make_train_step(model, model, device)
    step(batch, wrapper)  # the first step picks and loads its kernels
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step(batch, wrapper)
    ops = sorted({e.key for e in prof.key_averages()
                  if "attention" in e.key and e.key.startswith("aten::_")})
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return dict(device=name, kernel=sdpa_kernel(ops), ops=ops)


PROBES = {"matmul": matmul, "transformers": transformers_peer, "sdpa": sdpa}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in PROBES:
        print(f"usage: gpu_probes.py {{{','.join(PROBES)}}} ...", file=sys.stderr)
        return 2
    print(json.dumps(PROBES[argv[0]](argv[1:])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
