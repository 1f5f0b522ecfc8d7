"""Ready for a GPU: the CUDA paths checked for correctness, then BERT-large's figures.

    python benchmarks/gpu.py [--out PATH] [--only NAME ...] [--peak-tflops X] [--micro-batch 8]
        [--dry-run] [--tiny] [--device cuda|cpu] [--compile-backend inductor] [--keep DIR]

Every training is a ``tools/train.py`` subprocess on a shipped config with ``--cfg-options``
(``--graph`` for graph mode); the figures are what the run's ThroughputHook and LoggerHook wrote
to its ``scalars.jsonl`` (``tokens_per_s``, ``tflops``, ``mfu``, ``memory`` =
``torch.cuda.max_memory_allocated``). Passes, in order (``--only`` picks some):

- ``sdpa``: which ``scaled_dot_product_attention`` kernel BERT-large's bf16 training step runs.
- ``check-amp``: small BERT (``configs/bert_tiny.py``), bf16 AMP (``AmpOptimWrapper``) against
  float32, the loss of every step within ``RTOL['amp']``.
- ``check-graph``: the same, graph mode (``GraphOptimWrapper``: inductor) against eager, float32.
- ``bert-large``, ``bert-large-graph``: ``configs/bert_large.py``, sequences of 512, bf16; model
  TFLOP/s, MFU, tokens/s, peak memory. Under graph mode the hook counts no FLOPs, so TFLOP/s is
  the eager run's FLOPs per token times the graph run's tokens/s.
- ``bert-large-fsdp``, ``bert-large-fsdp-offload``: FSDP2 on one GPU. The engine shards only when
  ``parallel.fsdp > 1`` (one process is "single"; under ``torchrun --nproc_per_node 1`` too), so
  these runs go through this file's ``fsdp1`` entry: the Runner on a one-process mesh with the
  engine's own ``fully_shard`` policy (blocks, then the root; bf16 parameters, float32 gradient
  reduction; ``cpu_offload``). Nothing is sharded across devices: it measures FSDP2's machinery
  (per-block gathers and reshards, the mixed-precision policy, host offload) on one GPU.

Without CUDA it prints this plan with every command and measures nothing (exit 0). ``--tiny``
runs every pass on tiny shapes for a few steps, on the CPU too, to check the harness. Exit status:
0 when every selected pass ran and held its tolerance, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SMALL, LARGE = "configs/bert_tiny.py", "configs/bert_large.py"
# Relative tolerances on the training loss, at every logged step. Seen on a CPU (--tiny, 3
# steps): bf16 vs float32 2.9e-4; graph (aot_eager) vs eager 1e-7; FSDP2 bf16 vs eager bf16
# 3.3e-5. A GPU run reports its worst difference beside each tolerance: tighten them from it.
RTOL = {"amp": 1e-2, "graph": 1e-3, "figure_loss": 2e-2}
DEFAULT_TARGET_TFLOPS = 400.0
PASSES = ("sdpa", "check-amp", "check-graph", "bert-large", "bert-large-graph", "bert-large-fsdp",
          "bert-large-fsdp-offload")
_QUIET = ("default_hooks.checkpoint=None", "+default_hooks.logger.plot=False",
          "val_dataloader=None", "test_dataloader=None")
_BF16 = ("optim_wrapper.type=AmpOptimWrapper", "+optim_wrapper.dtype=bfloat16")

__all__ = ["PASSES", "RTOL", "Pass", "Run", "build_plan", "compare_losses", "figure_summary",
           "flops_per_token", "main", "peak_tflops", "read_scalars"]


@dataclass(frozen=True)
class Run:
    """One training process: ``tools/train.py`` (or this file's ``fsdp1``/``sdpa`` entries)."""

    name: str
    config: str
    options: tuple[str, ...]
    graph: bool = False
    entry: str = "train"  # "train", "fsdp1" (one-process FSDP2) or "sdpa" (kernel probe)

    def argv(self, work_root: str, python: str = "python") -> list[str]:
        script = "tools/train.py" if self.entry == "train" else "benchmarks/gpu.py"
        cmd = [python, script] + ([] if self.entry == "train" else [self.entry])
        cmd += [self.config, "--work-dir", os.path.join(work_root, self.name), "--debug"]
        cmd += ["--graph"] if self.graph else []
        return cmd + ["--cfg-options", *self.options]


@dataclass(frozen=True)
class Pass:
    """A line of the report: a probe, a check (``runs[0]`` against ``runs[1]``) or a figure."""

    name: str
    kind: str  # "probe", "check", "figure"
    what: str
    runs: tuple[str, ...]
    rtol: float | None = None
    gpu_only: bool = False


@dataclass
class Plan:
    passes: list[Pass]
    runs: dict[str, Run]
    settings: dict[str, Any] = field(default_factory=dict)


def build_plan(args: argparse.Namespace) -> Plan:
    """The passes and the runs they need, for ``args`` (full size, or ``--tiny``)."""
    tiny, device = args.tiny, args.device
    steps = 3 if tiny else args.check_steps
    small = [*_QUIET, f"+device={device}", f"train_cfg.max_iters={steps}",
             "default_hooks.logger.interval=1"]
    if tiny:
        small += ["train_dataloader.batch_size=2", "train_dataloader.dataset.max_seq_length=64",
                  "model.max_position_embeddings=64"]
    micro, accum, seq = (2, 2, 64) if tiny else (args.micro_batch, args.accum, args.seq)
    iters = 2 * accum if tiny else args.iters
    workers = (0 if tiny else 4) if args.workers is None else args.workers
    large = [*_QUIET, f"+device={device}", *_BF16, f"train_cfg.max_iters={iters}",
             f"default_hooks.logger.interval={accum}",  # one optimizer step per logged interval
             f"train_dataloader.batch_size={micro}", f"optim_wrapper.accumulative_counts={accum}",
             f"train_dataloader.dataset.max_seq_length={seq}",
             f"model.max_position_embeddings={seq}",
             f"train_dataloader.num_workers={workers}",
             # a short last batch would recompile graph mode inside the measured window
             "+train_dataloader.drop_last=True"]
    if workers:
        large += ["+train_dataloader.persistent_workers=True", "+train_dataloader.pin_memory=True"]
    if tiny:  # BERT-large's code path at a size a CPU trains in seconds
        large += ["model.num_layers=1", "model.hidden_size=64", "model.num_heads=2",
                  "model.ffn_hidden_size=128", "model.vocab_size=8192",
                  "train_dataloader.dataset.corpus.tokenizer.vocab_size=8192"]
    if args.peak_tflops:
        large.append(f"+default_hooks.throughput.peak_tflops={args.peak_tflops}")
    compiled = ([] if args.compile_backend == "inductor"
                else [f"+optim_wrapper.compile={{'backend': '{args.compile_backend}'}}"])
    runs = [
        Run("sdpa_probe", LARGE, tuple(large), entry="sdpa"),
        Run("small_fp32", SMALL, tuple(small)),
        Run("small_bf16", SMALL, (*small, *_BF16)),
        Run("small_graph_fp32", SMALL, (*small, *compiled), graph=True),
        Run("large_eager", LARGE, tuple(large)),
        # the parity check (verify_steps) would keep an eager copy of the model at step 1 and
        # inflate the peak memory; check-graph and the loss column cover parity
        Run("large_graph", LARGE, (*large, *compiled, "+optim_wrapper.verify_steps=0"),
            graph=True),
        Run("large_fsdp", LARGE, tuple(large), entry="fsdp1"),
        Run("large_fsdp_offload", LARGE, (*large, "+parallel.cpu_offload=True"), entry="fsdp1"),
    ]
    shape = f"{micro} x {seq} tokens per iteration, {accum} accumulated, bf16"
    passes = [
        Pass("sdpa", "probe", "SDPA kernel in BERT-large's bf16 training step", ("sdpa_probe",)),
        Pass("check-amp", "check", f"small BERT, bf16 AMP vs float32, {steps} steps",
             ("small_bf16", "small_fp32"), RTOL["amp"]),
        Pass("check-graph", "check", f"small BERT, graph ({args.compile_backend}) vs eager, "
             f"float32, {steps} steps", ("small_graph_fp32", "small_fp32"), RTOL["graph"]),
        Pass("bert-large", "figure", f"BERT-large eager, {shape}", ("large_eager",)),
        Pass("bert-large-graph", "figure", f"BERT-large --graph, {shape}", ("large_graph",)),
        Pass("bert-large-fsdp", "figure", f"BERT-large FSDP2 on a 1-process mesh, {shape}",
             ("large_fsdp",)),
        Pass("bert-large-fsdp-offload", "figure", f"BERT-large FSDP2 + cpu_offload, {shape}",
             ("large_fsdp_offload",), gpu_only=True),
    ]
    if args.only:
        passes = [p for p in passes if p.name in args.only]
    needed = {r for p in passes for r in p.runs}
    settings = dict(device=device, tiny=tiny, check_steps=steps, micro_batch=micro, seq=seq,
                    accumulative_counts=accum, iters=iters, compile_backend=args.compile_backend)
    return Plan(passes, {r.name: r for r in runs if r.name in needed}, settings)


# ------------------------------------------------------------------------------ pure helpers
def peak_tflops(device_name: str | None, override: float | None) -> tuple[float | None, str]:
    """The bf16 dense peak for MFU and where it comes from: ``override`` (``--peak-tflops``),
    else the engine's table by device name (``libai.hooks.throughput_hook.PEAK_TFLOPS``)."""
    if override:
        return float(override), "--peak-tflops"
    if not device_name:
        return None, "no GPU"
    from libai.hooks.throughput_hook import peak_tflops_by_name

    peak = peak_tflops_by_name(device_name, half=True)
    return peak, ("PEAK_TFLOPS table" if peak else f"{device_name!r} not in PEAK_TFLOPS: "
                  f"give --peak-tflops")


def compare_losses(got: dict[int, float], want: dict[int, float], rtol: float) -> dict[str, Any]:
    """``|got - want| / |want|`` at every step of ``want``; ok when every step is present,
    finite and within ``rtol``."""
    diffs = {}
    for step in sorted(set(want) & set(got)):
        a, b = got[step], want[step]
        finite = math.isfinite(a) and math.isfinite(b)
        diffs[step] = abs(a - b) / max(abs(b), 1e-12) if finite else math.inf
    at = max(diffs, key=diffs.__getitem__) if diffs else None
    worst = diffs[at] if diffs else None
    missing = sorted(set(want) - set(got))
    ok = worst is not None and not missing and worst <= rtol
    return dict(ok=ok, worst_rel_diff=worst, at_step=at, steps=len(want), rtol=rtol,
                missing_steps=missing)


def read_scalars(work_dir: str) -> list[dict[str, Any]]:
    """The training rows (``train/loss`` present) of the newest run folder's scalars.jsonl."""
    files = sorted(Path(work_dir).glob("*/scalars.jsonl"))
    if not files:
        return []
    rows = [json.loads(line) for line in files[-1].read_text().splitlines() if line.strip()]
    return [r for r in rows if "train/loss" in r]


def losses(rows: list[dict[str, Any]]) -> dict[int, float]:
    return {int(r["step"]): float(r["train/loss"]) for r in rows}


def flops_per_token(rows: list[dict[str, Any]]) -> float | None:
    """FLOPs per token of the counted step, from a row that logged both TFLOP/s and tokens/s."""
    for r in rows:
        if r.get("train/tflops") and r.get("train/tokens_per_s"):
            return r["train/tflops"] * 1e12 / r["train/tokens_per_s"]
    return None


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def figure_summary(rows: list[dict[str, Any]], peak: float | None, target: float | None,
                   flops_token: float | None = None) -> dict[str, Any]:
    """Steady-state figures of one run: the median over its logged intervals after the first
    (which holds the FLOP count, warm-up and compiling). TFLOP/s is the hook's, or
    ``flops_token`` x tokens/s when the run logged none (graph mode)."""
    steady = rows[1:] or rows
    tokens = _median(steady, "train/tokens_per_s")
    tflops, source = _median(steady, "train/tflops"), "ThroughputHook"
    if tflops is None and flops_token and tokens:
        tflops, source = flops_token * tokens / 1e12, "eager FLOPs/token x tokens/s"
    memory = [r["train/memory"] for r in rows if "train/memory" in r]
    time_s, data_s = _median(steady, "train/time"), _median(steady, "train/data_time")
    return dict(
        intervals=len(rows), steady_intervals=len(steady), tokens_per_s=tokens,
        tflops=tflops, tflops_source=source if tflops is not None else None,
        mfu=tflops / peak if tflops is not None and peak else None,
        meets_target=(tflops >= target) if tflops is not None and target else None,
        peak_memory_mib=max(memory) if memory else None,
        iteration_ms=1e3 * time_s if time_s is not None else None,
        data_ms=1e3 * data_s if data_s is not None else None)


def sdpa_kernel(ops: list[str]) -> str:
    """The SDPA implementation named by the profiler's op names (forward and backward)."""
    kinds = [("cudnn_attention", "cudnn"), ("flash_attention_for_cpu", "flash (CPU)"),
             ("flash_attention", "flash"), ("efficient_attention", "memory-efficient"),
             ("attention_math", "math")]
    found = [next((label for key, label in kinds if key in op), None) for op in ops]
    return " + ".join(dict.fromkeys(f for f in found if f)) or "none found"


# ------------------------------------------------------------------ child entry points
def _child_config(argv: list[str], prog: str) -> Any:
    from libai.config import Config, add_cfg_options_argument

    parser = argparse.ArgumentParser(prog=f"benchmarks/gpu.py {prog}")
    parser.add_argument("config")
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    add_cfg_options_argument(parser)
    args = parser.parse_args(argv)
    cfg = Config.fromfile(args.config)
    cfg.merge_from_options(args.cfg_options or {})
    cfg.work_dir = args.work_dir
    return cfg


def _fsdp1(argv: list[str]) -> None:
    """``fsdp1 CONFIG --work-dir DIR --cfg-options ...``: train as ``tools/train.py`` does, with
    the model sharded by FSDP2 over a mesh of this one process (``parallel.cpu_offload`` read)."""
    import socket

    import torch
    from torch.distributed.device_mesh import init_device_mesh

    from libai.parallel.apply import _fully_shard
    from libai.runner import Runner
    from libai.utils import dist
    from libai.utils.errors import ConfigError

    cfg = _child_config(argv, "fsdp1")

    class OneProcessFSDPRunner(Runner):
        def _wrap(self, model: Any) -> Any:
            pc = self.parallel  # one process: strategy "single", the FSDP options as given
            if pc.cpu_offload and self.device.type != "cuda":
                raise ConfigError("parallel.cpu_offload=True needs a GPU run.")
            dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(
                str(self.cfg.optim_wrapper.get("dtype")))
            # the engine's sharding policy itself (parallelize() calls it only for fsdp > 1)
            mesh = init_device_mesh(self.device.type, (1,), mesh_dim_names=("fsdp",))
            _fully_shard(model, pc, mesh, dtype)
            self.logger.info(f"FSDP2 on a 1-process mesh (benchmarks/gpu.py): param_dtype "
                             f"{dtype}, cpu_offload={pc.cpu_offload}, sharded: "
                             f"{dist.is_sharded(model)}")
            return super()._wrap(model)  # graph mode, when asked, compiles block by block

    with socket.socket() as sock:  # a free port for the process group's store
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                      LOCAL_RANK="0", WORLD_SIZE="1")
    # the engine's process group: nccl on a GPU, gloo on a CPU, or env_cfg.dist_backend
    dist.init_dist(backend=(cfg.get("env_cfg") or {}).get("dist_backend"))
    OneProcessFSDPRunner.from_cfg(cfg).train()


def _sdpa(argv: list[str]) -> None:
    """``sdpa CONFIG --cfg-options ...``: one bf16 training step of the config's model as the
    runner takes it (AmpOptimWrapper, ``make_train_step``, a batch of the train loader) under
    the profiler; prints the attention ops that ran, as one JSON line."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from libai.data import build_dataloader
    from libai.model import make_train_step
    from libai.optim import AmpOptimWrapper
    from libai.registry import MODELS

    cfg = _child_config(argv, "sdpa")
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
    print(json.dumps(dict(device=name, kernel=sdpa_kernel(ops), ops=ops)))


# ----------------------------------------------------------------------------- driver
def execute(run: Run, work_root: str, timeout: float) -> dict[str, Any]:
    """Run ``run`` as a subprocess (its own process group: killed whole on timeout); its
    output goes to ``<work_root>/<name>.out``; returns status, seconds, rows or probe."""
    import signal

    out_path = os.path.join(work_root, f"{run.name}.out")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")])))
    result: dict[str, Any] = dict(name=run.name, command=shlex.join(run.argv(work_root)),
                                  output=out_path)
    start = time.perf_counter()
    with open(out_path, "w") as out:
        proc = subprocess.Popen(run.argv(work_root, sys.executable), cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the run and its data loader workers
            proc.wait()
            rc = None
    result["seconds"] = time.perf_counter() - start
    text = Path(out_path).read_text(errors="replace")
    if rc != 0:
        why = f"timed out after {timeout:.0f} s" if rc is None else f"exit status {rc}"
        return result | dict(status="failed", error=why, tail=text[-4000:])
    if run.entry == "sdpa":
        last = next(line for line in reversed(text.splitlines()) if line.startswith("{"))
        return result | dict(status="ok", probe=json.loads(last))
    rows = read_scalars(os.path.join(work_root, run.name))
    if not rows:
        return result | dict(status="failed", error="no training rows in scalars.jsonl",
                             tail=text[-4000:])
    return result | dict(status="ok", rows=rows)


def evaluate(p: Pass, results: dict[str, dict], peak: float | None,
             target: float | None) -> dict[str, Any]:
    """One pass's report entry from the results of its runs."""
    entry: dict[str, Any] = dict(asdict(p), status="ok")
    runs = [results[name] for name in p.runs]
    bad = next((r for r in runs if r["status"] != "ok"), None)
    if bad is not None:
        return entry | dict(status=bad["status"], error=f"{bad['name']}: {bad['error']}")
    if p.kind == "probe":
        probe = runs[0]["probe"]
        slow = probe["kernel"] == "math" and probe["device"] != "cpu"  # a CPU has no other
        return entry | probe | dict(status="slow kernel" if slow else "ok")
    if p.kind == "check":
        comparison = compare_losses(losses(runs[0]["rows"]), losses(runs[1]["rows"]), p.rtol)
        return entry | comparison | dict(status="ok" if comparison["ok"] else "out of tolerance")
    rows, eager = runs[0]["rows"], results.get("large_eager", {})
    eager_rows = eager.get("rows") if eager.get("status") == "ok" else None
    entry |= figure_summary(rows, peak, target, flops_per_token(eager_rows or []))
    if eager_rows and p.runs[0] != "large_eager":
        comparison = compare_losses(losses(rows), losses(eager_rows), RTOL["figure_loss"])
        entry["loss_vs_eager"] = comparison
        if not comparison["ok"]:
            entry["status"] = "loss differs from eager"
    return entry


def _fmt(value: Any, spec: str) -> str:
    """``format(value, spec)``, or a dash as wide as ``spec`` asks for a missing value."""
    if value is None:
        width = "".join(c for c in spec.split(".")[0] if c.isdigit())
        return format("-", f">{width}") if width else "-"
    return format(value, spec)


def print_report(entries: list[dict[str, Any]]) -> None:
    checks = [e for e in entries if e["kind"] != "figure"]
    figures = [e for e in entries if e["kind"] == "figure"]
    if checks:
        print(f"\n{'pass':<26}{'result':<20}details")
        for e in checks:
            if e["status"] not in ("ok", "out of tolerance", "slow kernel"):
                detail = e.get("error", "")
            elif e["kind"] == "probe":
                detail = f"{e['kernel']} ({', '.join(e['ops'])})"
            else:
                detail = (f"worst relative loss difference {_fmt(e['worst_rel_diff'], '.2e')} "
                          f"at step {e['at_step']} of {e['steps']} (rtol {e['rtol']:g})")
            print(f"{e['name']:<26}{e['status']:<20}{detail}")
    if figures:
        print(f"\n{'figure':<26}{'tokens/s':>10}{'TFLOP/s':>9}{'MFU':>7}{'peak MiB':>10}"
              f"{'ms/iter':>9}{'loss vs eager':>15}  result")
        for e in figures:
            if "tokens_per_s" not in e:
                print(f"{e['name']:<26}{'':>60}  {e['status']}: {e.get('error', '')}")
                continue
            vs = e.get("loss_vs_eager", {}).get("worst_rel_diff")
            print(f"{e['name']:<26}{_fmt(e['tokens_per_s'], '10.0f')}{_fmt(e['tflops'], '9.3g')}"
                  f"{_fmt(e['mfu'], '7.1%')}{_fmt(e['peak_memory_mib'], '10.0f')}"
                  f"{_fmt(e['iteration_ms'], '9.1f')}{_fmt(vs, '15.1e')}  {e['status']}")


def print_plan(plan: Plan, work_root: str) -> None:
    for p in plan.passes:
        tol = f" (loss rtol {p.rtol:g} at every step)" if p.rtol else ""
        print(f"  {p.name:<24} {p.what}{tol}")
        for name in p.runs:
            print(f"      {shlex.join(plan.runs[name].argv(work_root))}")



def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "libai_gpu.json"),
                        help="the JSON report. Defaults to %(default)s")
    parser.add_argument("--only", nargs="+", choices=PASSES, metavar="PASS",
                        help=f"run these passes only: {', '.join(PASSES)}")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan and run nothing (what a machine without CUDA does)")
    parser.add_argument("--tiny", action="store_true",
                        help="every pass on tiny shapes for a few steps (a CPU can run it)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="for --tiny. Defaults to cuda when there is one, else cpu")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's bf16 dense peak for MFU. Defaults to the engine's "
                             "table by device name (H100 SXM: 989)")
    parser.add_argument("--target-tflops", type=float, default=DEFAULT_TARGET_TFLOPS)
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per iteration")
    parser.add_argument("--accum", type=int, default=32,
                        help="iterations per optimizer step (configs/bert_large.py: 256 / 8)")
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--iters", type=int, default=128,
                        help="iterations of each figure run: the first --accum are warm-up")
    parser.add_argument("--check-steps", type=int, default=8)
    parser.add_argument("--workers", type=int, default=None,
                        help="data loader workers of the figure runs. Defaults to 4 (--tiny: 0)")
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile backend of graph mode (aot_eager: no code generation)")
    parser.add_argument("--budget", type=float, default=480,
                        help="seconds after which no new run starts. Defaults to %(default)s")
    parser.add_argument("--run-timeout", type=float, default=420)
    parser.add_argument("--keep", metavar="DIR", help="keep work dirs and logs here")
    args = parser.parse_args(argv)
    if args.iters < 2 * args.accum:
        parser.error(f"--iters {args.iters} must be at least 2 x --accum ({2 * args.accum}): "
                     f"the first logged interval is warm-up")
    return args


def _write(report: dict[str, Any], path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, default=str)
    os.replace(tmp, path)


def run_plan(plan: Plan, args: argparse.Namespace, work_root: str, peak: float | None,
             ) -> tuple[list[dict], dict[str, dict]]:
    """Each pass's runs in order (a run shared by two passes runs once), then its entry."""
    results: dict[str, dict] = {}
    entries = []
    start = time.monotonic()
    for p in plan.passes:
        for name in p.runs:
            if name in results:
                continue
            elapsed = time.monotonic() - start
            if p.gpu_only and args.device != "cuda":
                results[name] = dict(name=name, status="skipped", error="needs a GPU")
            elif elapsed > args.budget:
                results[name] = dict(name=name, status="skipped",
                                     error=f"the --budget of {args.budget:.0f} s was spent")
            else:
                print(f"[{elapsed:4.0f} s] {name} ...", flush=True)
                results[name] = execute(plan.runs[name], work_root, args.run_timeout)
                r = results[name]
                print(f"         {r['status']} in {r['seconds']:.0f} s"
                      + (f": {r['error']}\n{r['tail'][-1500:]}" if r["status"] != "ok" else ""),
                      flush=True)
        # tiny shapes say nothing about speed: no target to meet
        entries.append(evaluate(p, results, peak, None if args.tiny else args.target_tflops))
    return entries, results


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("fsdp1", "sdpa"):
        from libai.utils.cli import run_cli
        from libai.utils.dist import destroy_dist

        run_cli(_fsdp1 if argv[0] == "fsdp1" else _sdpa, argv[1:], teardown=destroy_dist)
    args = parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    if args.tiny and args.device == "cuda" and not cuda:
        print("error: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    # full size needs a GPU: elsewhere the plan is printed, as the GPU would run it
    dry = args.dry_run or (not args.tiny and (not cuda or args.device == "cpu"))
    args.device = "cuda" if not args.tiny else args.device or ("cuda" if cuda else "cpu")
    plan = build_plan(args)
    report: dict[str, Any] = dict(
        benchmark="benchmarks/gpu.py", date=datetime.datetime.now().isoformat(timespec="seconds"),
        torch=torch.__version__, cuda=torch.version.cuda, measured=not dry,
        settings=plan.settings, target_tflops=args.target_tflops, rtol=RTOL,
        plan=[dict(asdict(p), commands=[shlex.join(plan.runs[r].argv("WORK")) for r in p.runs])
              for p in plan.passes])
    if dry:
        why = "--dry-run" if args.dry_run else (
            f"no CUDA device here (torch {torch.__version__})" if not cuda else "--device cpu")
        print(f"benchmarks/gpu.py: {why}, so nothing is measured and nothing is trained.\n"
              f"On one GPU it runs these passes, in order (WORK: a temporary folder):")
        print_plan(plan, "WORK")
        _write(report, args.out)
        print(f"\nThe plan (measured: false) is in {args.out}")
        return 0

    name = torch.cuda.get_device_name(0) if args.device == "cuda" else None
    peak, source = peak_tflops(name, args.peak_tflops)
    work_root = args.keep or tempfile.mkdtemp(prefix="libai_gpu_")
    os.makedirs(work_root, exist_ok=True)
    print(f"benchmarks/gpu.py on {name or 'cpu'}, torch {torch.__version__}; bf16 peak "
          f"{_fmt(peak, 'g')} TFLOP/s ({source}); target {args.target_tflops:g} TFLOP/s"
          + ("; tiny shapes: the figures say nothing about speed" if args.tiny else ""))
    print_plan(plan, work_root)
    start = time.monotonic()
    entries, results = run_plan(plan, args, work_root, peak)
    report |= dict(device=name or "cpu", peak_tflops=peak, peak_source=source, passes=entries,
                   runs=results, seconds=time.monotonic() - start)
    print_report(entries)
    _write(report, args.out)
    failed = [e["name"] for e in entries if e["status"] not in ("ok", "skipped", "slow kernel")]
    if failed or args.keep:
        print(f"\nLogs: {work_root}")
    else:
        shutil.rmtree(work_root, ignore_errors=True)
    print(f"Report: {args.out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
