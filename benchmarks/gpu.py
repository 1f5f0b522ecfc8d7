"""Where libai stands on a GPU: the CUDA paths checked for correctness, then the figures beside the
chip's own matrix rate and the transformers peer, all measured in the same run.

    python benchmarks/gpu.py [--out PATH] [--markdown PATH] [--only NAME ...] [--budget 480]
        [--peak-tflops X] [--dry-run] [--tiny] [--device cuda|cpu] [--compile-backend B] [--keep DIR]

Every libai training is a ``tools/train.py`` process on a shipped config with ``--cfg-options`` (``--graph`` for graph mode): public config keys only.
Its figures are what the run's ThroughputHook and LoggerHook wrote to ``scalars.jsonl``
(``tokens_per_s``, ``tflops``, ``memory`` = ``torch.cuda.max_memory_allocated``). The other
measurements are ``benchmarks/gpu_probes.py`` processes. Passes, in the order they run (a
``--budget`` of 8 minutes skips what would start after it and says so; ``--only`` picks some):

- ``sdpa``: which ``scaled_dot_product_attention`` kernel BERT-large's bf16 training step runs.
- ``matmul``: the chip's bf16 matrix rate, a timed 8192 x 8192 x 8192 product: the MFU column
  "of matmul" is read against it, beside the table's peak ("MFU").
- ``check-amp``, ``check-graph``: small BERT (``configs/bert_tiny.py``), bf16 AMP against float32
  and graph mode against eager, the loss of every step within ``RTOL``.
- ``bert-large[-M]``, ``bert-large-graph[-M]``, ``transformers[-M]``: ``configs/bert_large.py``
  (sequences of 512, bf16) eager and ``--graph``, and Hugging Face ``BertForPreTraining`` at the
  same shape, for micro-batches M of 8 (no suffix), 32, 64 and 16, each accumulating to the global
  batch of 256: tokens/s, model TFLOP/s, MFU, peak memory. Under graph mode the hook counts no
  FLOPs: TFLOP/s is the eager run's FLOPs per token times the graph run's tokens/s.
- ``llama3-1b``: ``configs/llama3_1b.py`` (the Llama-3.2-1B shape, blocks of 2,048) in bf16 with
  the micro-batch its table picks for this GPU (``micro_batch``, libai/runner/batch_fit.py).
- ``bert-large-fsdp``, ``bert-large-fsdp-offload``: FSDP2 on one GPU, over a mesh of the one
  process, through the public config: ``parallel=dict(fsdp=1, one_process_fsdp=True)``, and
  with host offload ``parallel=dict(fsdp=1, cpu_offload=True)`` (docs/parallel.md). Nothing is
  sharded across devices: it measures FSDP2's machinery (gathers, the bf16 policy, offload)
  against eager. Skipped, with the engine's reason, where its config check refuses them.

Without CUDA it prints this plan with every command and measures nothing (exit 0). ``--tiny``
runs every pass on tiny shapes for a few steps, on the CPU too, to check the harness (graph mode
with the ``eager`` backend, dynamo's trace alone, unless ``--compile-backend`` says otherwise;
two runs at a time on a CPU, ``--jobs``). It writes a JSON
(``--out``) and the markdown table docs/benchmarks.md shows (``--markdown``). Exit status: 0 when
every selected pass ran (or was skipped) and held its tolerance, 1 otherwise.
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
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_probes import sdpa_kernel  # noqa: E402  (a sibling script, not a package)

SMALL, LARGE, LLAMA = "configs/bert_tiny.py", "configs/bert_large.py", "configs/llama3_1b.py"
# Relative tolerances on the training loss, at every logged step. Seen on a CPU (--tiny, 3
# steps): bf16 vs float32 2.9e-4; graph (aot_eager) vs eager 1e-7. A GPU run reports its worst
# difference beside each tolerance: tighten them from it.
RTOL = {"amp": 1e-2, "graph": 1e-3, "figure_loss": 2e-2}
DEFAULT_TARGET_TFLOPS = 400.0
GLOBAL_BATCH = 256  # configs/bert_large.py's sequences per optimizer step
MICRO_BATCHES = (8, 32, 64, 16)  # the order they run in: the budget cuts the last first


def _suffix(m: int) -> str:
    return "" if m == 8 else f"-{m}"


PASSES = ("sdpa", "matmul", "check-amp", "check-graph",
          *(name for m in MICRO_BATCHES[:2]
            for name in (f"bert-large{_suffix(m)}", f"transformers{_suffix(m)}",
                         f"bert-large-graph{_suffix(m)}")),
          "llama3-1b", "bert-large-fsdp", "bert-large-fsdp-offload",
          *(name for m in MICRO_BATCHES[2:]
            for name in (f"bert-large{_suffix(m)}", f"transformers{_suffix(m)}",
                         f"bert-large-graph{_suffix(m)}")))
_QUIET = ("default_hooks.checkpoint=None", "+default_hooks.logger.plot=False",
          "val_dataloader=None", "test_dataloader=None")
_BF16 = ("optim_wrapper.type=AmpOptimWrapper", "+optim_wrapper.dtype=bfloat16")
_TINY_BERT = ("model.num_layers=1", "model.hidden_size=64", "model.num_heads=2",
              "model.ffn_hidden_size=128", "model.vocab_size=8192",
              "train_dataloader.dataset.corpus.tokenizer.vocab_size=8192")
_TINY_LLAMA = ("model.num_layers=1", "model.hidden_size=64", "model.num_heads=4",
               "model.num_kv_heads=2", "model.ffn_hidden_size=128", "model.vocab_size=8192",
               "train_dataloader.dataset.corpus.tokenizer.vocab_size=8192",
               "train_dataloader.dataset.seq_length=64", "micro_batch.cpu=2",
               "micro_batch.global_batch=4")

__all__ = ["PASSES", "RTOL", "Pass", "Run", "build_plan", "compare_losses", "figure_summary",
           "flops_per_token", "main", "markdown_table", "peak_tflops", "read_scalars",
           "sdpa_kernel"]


@dataclass(frozen=True)
class Run:
    """One process: ``tools/train.py`` or a probe of
    ``benchmarks/gpu_probes.py`` (``entry``: "sdpa", "matmul", "transformers")."""

    name: str
    config: str
    options: tuple[str, ...]
    graph: bool = False
    entry: str = "train"

    def argv(self, work_root: str, python: str = "python") -> list[str]:
        if self.entry in ("matmul", "transformers"):
            return [python, "benchmarks/gpu_probes.py", self.entry, *self.options]
        if self.entry == "sdpa":
            cmd = [python, "benchmarks/gpu_probes.py", "sdpa"]
        else:
            cmd = [python, "tools/train.py"]
        cmd += [self.config, "--work-dir", os.path.join(work_root, self.name)]
        cmd += ["--debug"] if self.entry == "train" else []
        cmd += ["--graph"] if self.graph else []
        return cmd + ["--cfg-options", *self.options]


@dataclass(frozen=True)
class Pass:
    """A line of the report: a probe, a check (``runs[0]`` against ``runs[1]``), a figure (a
    libai run; ``eager``: the eager run its loss and FLOPs per token are read against) or a peer
    (the transformers probe; ``eager``: the libai run at its shape)."""

    name: str
    kind: str  # "probe", "check", "figure", "peer"
    what: str
    runs: tuple[str, ...]
    rtol: float | None = None
    skip: str | None = None  # why this pass cannot run here (said in the report)
    eager: str | None = None
    micro: int | None = None


@dataclass
class Plan:
    passes: list[Pass]
    runs: dict[str, Run]
    settings: dict[str, Any] = field(default_factory=dict)


def engine_refusal(parallel: dict[str, Any]) -> str | None:
    """Why this engine refuses ``parallel`` in one process, or None: asked of its own config
    check (``libai.parallel.parse_parallel``), as a run would meet it."""
    from libai.parallel import parse_parallel
    from libai.utils.errors import ConfigError

    try:
        parse_parallel(parallel, 1)
    except ConfigError as e:
        return f"this engine refuses it: {e}"
    return None


def _llama_fit(device: str, tiny: bool) -> tuple[int, int]:
    """The micro-batch and accumulation configs/llama3_1b.py's table picks here (what its run
    will log): the run's length and logging follow its optimizer steps."""
    import torch

    from libai.config import Config
    from libai.runner.batch_fit import resolve

    cfg = Config.fromfile(str(ROOT / LLAMA))
    if tiny:
        cfg.merge_from_options(list(_TINY_LLAMA))
    try:
        fit = resolve(cfg, torch.device(device if device == "cpu" else "cuda:0"), 1)
    except (RuntimeError, AssertionError):  # the dry plan where torch says CUDA but has none
        fit = resolve(cfg, torch.device("cpu"), 1)
    return fit.micro, fit.accumulation


def build_plan(args: argparse.Namespace) -> Plan:
    """The passes and the runs they need, for ``args`` (full size, or ``--tiny``)."""
    tiny, device = args.tiny, args.device
    steps = 3 if tiny else args.check_steps
    small = [*_QUIET, f"+device={device}", f"train_cfg.max_iters={steps}",
             "default_hooks.logger.interval=1"]
    if tiny:
        small += ["train_dataloader.batch_size=2", "train_dataloader.dataset.max_seq_length=64",
                  "model.max_position_embeddings=64"]
    seq = 64 if tiny else args.seq
    workers = (0 if tiny else 4) if args.workers is None else args.workers
    base_micro = 2 if tiny else args.micro_batch
    global_batch = 4 if tiny else args.micro_batch * args.accum
    optimizer_steps = 2 if tiny else max(2, args.iters // args.accum)
    # --tiny: dynamo's trace alone (the graph path, in seconds: inductor takes ~50 s per run)
    backend = args.compile_backend or ("eager" if tiny else "inductor")
    compiled = ([] if backend == "inductor"
                else [f"+optim_wrapper.compile={{'backend': '{backend}'}}"])
    common = [*_QUIET, f"+device={device}", *_BF16,
              f"train_dataloader.num_workers={workers}",
              "+train_dataloader.drop_last=True"]  # a short last batch would recompile graph mode
    if workers:
        common += ["+train_dataloader.persistent_workers=True", "+train_dataloader.pin_memory=True"]
    if args.peak_tflops:
        common.append(f"+default_hooks.throughput.peak_tflops={args.peak_tflops}")

    def bert(micro: int, accum: int, processes: int = 1) -> list[str]:
        return [*common, f"train_cfg.max_iters={optimizer_steps * accum}",
                f"default_hooks.logger.interval={accum}",  # one optimizer step per interval
                f"train_dataloader.batch_size={micro}", f"optim_wrapper.accumulative_counts={accum}",
                f"train_dataloader.dataset.max_seq_length={seq}",
                f"model.max_position_embeddings={seq}", *(_TINY_BERT if tiny else ())]

    runs = [Run("sdpa_probe", LARGE, tuple(bert(base_micro, 1)), entry="sdpa"),
            Run("matmul", "", ("--n", "256" if tiny else "8192", "--iters", "5" if tiny else "50",
                               "--device", device), entry="matmul"),
            Run("small_fp32", SMALL, tuple(small)),
            Run("small_bf16", SMALL, (*small, *_BF16)),
            Run("small_graph_fp32", SMALL, (*small, *compiled), graph=True)]
    passes = [
        Pass("sdpa", "probe", "SDPA kernel in BERT-large's bf16 training step", ("sdpa_probe",)),
        Pass("matmul", "probe", f"bf16 matrix product {'256' if tiny else '8192'}^3: the chip's "
             f"rate", ("matmul",)),
        Pass("check-amp", "check", f"small BERT, bf16 AMP vs float32, {steps} steps",
             ("small_bf16", "small_fp32"), RTOL["amp"]),
        Pass("check-graph", "check", f"small BERT, graph ({backend}) vs eager, float32, "
             f"{steps} steps", ("small_graph_fp32", "small_fp32"), RTOL["graph"])]
    for m in MICRO_BATCHES:
        micro = max(1, m * base_micro // 8)  # --tiny: 2, 8, 16, 4
        accum = max(1, global_batch // micro)
        shape = f"{micro} x {seq} tokens per iteration, {accum} accumulated, bf16"
        eager, graph, peer = (f"large_eager{_suffix(m)}".replace("-", "_"),
                              f"large_graph{_suffix(m)}".replace("-", "_"), f"hf{_suffix(m)}")
        runs += [Run(eager, LARGE, tuple(bert(micro, accum))),
                 # the parity check (verify_steps) would keep an eager copy of the model at step
                 # 1 and inflate the peak memory; check-graph and the loss column cover parity
                 Run(graph, LARGE, (*bert(micro, accum), *compiled,
                                    "+optim_wrapper.verify_steps=0"), graph=True),
                 Run(peer, "", ("--micro", str(micro), "--accum", str(accum), "--seq", str(seq),
                                "--iters", str(optimizer_steps * accum), "--device", device,
                                *(["--tiny"] if tiny else [])), entry="transformers")]
        passes += [
            Pass(f"bert-large{_suffix(m)}", "figure", f"BERT-large eager, {shape}", (eager,),
                 micro=micro),
            Pass(f"transformers{_suffix(m)}", "peer", f"transformers BertForPreTraining, {shape},"
                 f" fused AdamW on CUDA", (peer,), eager=eager, micro=micro),
            Pass(f"bert-large-graph{_suffix(m)}", "figure", f"BERT-large --graph ({backend}), "
                 f"{shape}", (graph,), eager=eager, micro=micro)]
    lm_micro, lm_accum = _llama_fit(device, tiny)
    lm_seq = 64 if tiny else 2048
    runs.append(Run("llama", LLAMA, (*_QUIET, f"+device={device}", *_BF16, *(
        _TINY_LLAMA if tiny else ()), f"train_cfg.max_iters={optimizer_steps * lm_accum}",
        f"default_hooks.logger.interval={lm_accum}", f"train_dataloader.num_workers={workers}")))
    passes.append(Pass("llama3-1b", "figure", f"configs/llama3_1b.py, bf16, {lm_micro} x {lm_seq}"
                       f" tokens per iteration (its table), {lm_accum} accumulated", ("llama",),
                       micro=lm_micro))
    for name, run, parallel in (
            ("bert-large-fsdp-offload", "large_fsdp_offload", dict(fsdp=1, cpu_offload=True)),
            ("bert-large-fsdp", "large_fsdp", dict(fsdp=1, one_process_fsdp=True))):
        options = [f"+parallel.{key}={value}" for key, value in parallel.items()]
        text = "dict(" + ", ".join(f"{k}={v}" for k, v in parallel.items()) + ")"
        runs.append(Run(run, LARGE, (*bert(base_micro, global_batch // base_micro), *options)))
        passes.append(Pass(name, "figure", f"BERT-large FSDP2 on one process, parallel="
                           f"{text}, {base_micro} x {seq} tokens per iteration, "
                           f"{global_batch // base_micro} accumulated, bf16", (run,),
                           skip=engine_refusal(parallel), eager="large_eager", micro=base_micro))
    order = {name: i for i, name in enumerate(PASSES)}
    passes.sort(key=lambda p: order[p.name])
    if args.only:
        passes = [p for p in passes if p.name in args.only]
    needed = {r for p in passes for r in p.runs}
    settings = dict(device=device, tiny=tiny, check_steps=steps, micro_batches=[
        p.micro for p in passes if p.name.startswith("bert-large") and p.micro], seq=seq,
        global_batch=global_batch, optimizer_steps=optimizer_steps, compile_backend=backend)
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
    if run.entry in ("sdpa", "matmul", "transformers"):
        last = next((line for line in reversed(text.splitlines()) if line.startswith("{")), None)
        if last is None:
            return result | dict(status="failed", error="no JSON line", tail=text[-4000:])
        return result | dict(status="ok", probe=json.loads(last))
    rows = read_scalars(os.path.join(work_root, run.name))
    if not rows:
        return result | dict(status="failed", error="no training rows in scalars.jsonl",
                             tail=text[-4000:])
    return result | dict(status="ok", rows=rows)


def evaluate(p: Pass, results: dict[str, dict], peak: float | None, target: float | None,
             matmul: float | None = None) -> dict[str, Any]:
    """One pass's report entry from the results of its runs (``matmul``: the measured rate)."""
    entry: dict[str, Any] = dict(asdict(p), status="ok")
    runs = [results[name] for name in p.runs]
    bad = next((r for r in runs if r["status"] != "ok"), None)
    if bad is not None:
        return entry | dict(status=bad["status"], error=f"{bad['name']}: {bad['error']}")
    if p.kind == "probe":
        probe = runs[0]["probe"]
        slow = probe.get("kernel") == "math" and probe["device"] != "cpu"  # a CPU has no other
        return entry | probe | dict(status="slow kernel" if slow else "ok")
    if p.kind == "check":
        comparison = compare_losses(losses(runs[0]["rows"]), losses(runs[1]["rows"]), p.rtol)
        return entry | comparison | dict(status="ok" if comparison["ok"] else "out of tolerance")
    eager = results.get(p.eager or "", {})
    eager_rows = eager.get("rows") if eager.get("status") == "ok" else None
    if p.kind == "peer":
        probe = runs[0]["probe"]
        entry |= dict(tokens_per_s=probe["tokens_per_s"], peak_memory_mib=probe["peak_memory_mib"],
                      iteration_ms=probe["iteration_ms"], tflops=None, mfu=None, probe=probe)
        if eager_rows:  # the same FLOPs per token as libai's model: the same shape
            per_token = flops_per_token(eager_rows)
            entry["tflops"] = per_token * probe["tokens_per_s"] / 1e12 if per_token else None
            entry["tflops_source"] = "libai's FLOPs/token x tokens/s"
            entry["mfu"] = entry["tflops"] / peak if entry["tflops"] and peak else None
    else:
        rows = runs[0]["rows"]
        entry |= figure_summary(rows, peak, target, flops_per_token(eager_rows or []))
        if eager_rows and p.eager != p.runs[0]:
            comparison = compare_losses(losses(rows), losses(eager_rows), RTOL["figure_loss"])
            entry["loss_vs_eager"] = comparison
            if not comparison["ok"]:
                entry["status"] = "loss differs from eager"
    entry["of_matmul"] = entry["tflops"] / matmul if entry.get("tflops") and matmul else None
    return entry


def _fmt(value: Any, spec: str) -> str:
    """``format(value, spec)``, or a dash as wide as ``spec`` asks for a missing value."""
    if value is None:
        width = "".join(c for c in spec.split(".")[0] if c.isdigit())
        return format("-", f">{width}") if width else "-"
    return format(value, spec)


def _vs_peer(e: dict[str, Any], entries: list[dict[str, Any]]) -> float | None:
    """tokens/s of a libai figure over the transformers peer's at its micro-batch."""
    if not e["name"].startswith("bert-large") or "fsdp" in e["name"] or not e.get("tokens_per_s"):
        return None
    peer = next((x for x in entries if x["kind"] == "peer" and x.get("micro") == e.get("micro")
                 and x.get("tokens_per_s")), None)
    return e["tokens_per_s"] / peer["tokens_per_s"] if peer else None


def print_report(entries: list[dict[str, Any]]) -> None:
    checks = [e for e in entries if e["kind"] in ("probe", "check")]
    figures = [e for e in entries if e["kind"] in ("figure", "peer")]
    if checks:
        print(f"\n{'pass':<26}{'result':<20}details")
        for e in checks:
            if e["status"] not in ("ok", "out of tolerance", "slow kernel"):
                detail = e.get("error", "")
            elif e["name"] == "matmul":
                detail = f"{e['tflops']:.4g} TFLOP/s bf16 ({e['n']}^3, {e['device']})"
            elif e["kind"] == "probe":
                detail = f"{e['kernel']} ({', '.join(e['ops'])})"
            else:
                detail = (f"worst relative loss difference {_fmt(e['worst_rel_diff'], '.2e')} "
                          f"at step {e['at_step']} of {e['steps']} (rtol {e['rtol']:g})")
            print(f"{e['name']:<26}{e['status']:<20}{detail}")
    if figures:
        print(f"\n{'figure':<26}{'tokens/s':>10}{'TFLOP/s':>9}{'MFU':>7}{'matmul':>8}"
              f"{'peak MiB':>10}{'ms/iter':>9}{'vs HF':>7}{'loss vs eager':>15}  result")
        for e in figures:
            if "tokens_per_s" not in e:
                print(f"{e['name']:<26}{'':>75}  {e['status']}: {e.get('error', '')}")
                continue
            vs = e.get("loss_vs_eager", {}).get("worst_rel_diff")
            print(f"{e['name']:<26}{_fmt(e['tokens_per_s'], '10.0f')}{_fmt(e['tflops'], '9.3g')}"
                  f"{_fmt(e['mfu'], '7.1%')}{_fmt(e.get('of_matmul'), '8.1%')}"
                  f"{_fmt(e['peak_memory_mib'], '10.0f')}{_fmt(e['iteration_ms'], '9.1f')}"
                  f"{_fmt(_vs_peer(e, entries), '7.2f')}{_fmt(vs, '15.1e')}  {e['status']}")


def markdown_table(report: dict[str, Any]) -> str:
    """The table docs/benchmarks.md shows, from a measured report."""
    matmul = next((e for e in report["passes"] if e["name"] == "matmul" and "tflops" in e), None)
    head = (f"`python benchmarks/gpu.py` on {report['device']}, torch {report['torch']}, "
            f"{report['date']}, commit {report.get('commit') or '?'}"
            + ("; tiny shapes: the figures say nothing about speed" if report["settings"]["tiny"]
               else "") + ".\n\n")
    lines = ["| pass | what | tokens/s | model TFLOP/s | MFU (table peak) | of measured matmul "
             "| peak memory (GB) | vs transformers | result |", "|" + " --- |" * 9]
    if matmul:
        lines.append(f"| matmul | {matmul['what']} | | {matmul['tflops']:.4g} | "
                     f"{_fmt(matmul['tflops'] / report['peak_tflops'] if report.get('peak_tflops') else None, '.0%')} "
                     f"| 100% | | | ok |")
    entries = report["passes"]
    for e in entries:
        if e["kind"] not in ("figure", "peer"):
            continue
        memory = e.get("peak_memory_mib")
        result = e["status"] + (f": {e['error']}" if e.get("error") else "")
        lines.append(f"| {e['name']} | {e['what']} | {_fmt(e.get('tokens_per_s'), ',.0f')} | "
                     f"{_fmt(e.get('tflops'), '.3g')} | {_fmt(e.get('mfu'), '.1%')} | "
                     f"{_fmt(e.get('of_matmul'), '.1%')} | "
                     f"{_fmt(memory / 1024 if memory else None, '.1f')} | "
                     f"{_fmt(_vs_peer(e, entries), '.2f')} | {result} |")
    return head + "\n".join(lines) + "\n"


def print_plan(plan: Plan, work_root: str) -> None:
    for p in plan.passes:
        tol = f" (loss rtol {p.rtol:g} at every step)" if p.rtol else ""
        print(f"  {p.name:<24} {p.what}{tol}")
        if p.skip:
            print(f"      skipped: {p.skip}")
            continue
        for name in p.runs:
            print(f"      {shlex.join(plan.runs[name].argv(work_root))}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "libai_gpu.json"),
                        help="the JSON report. Defaults to %(default)s")
    parser.add_argument("--markdown", default=None,
                        help="the markdown table. Defaults to --out with the suffix .md")
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
    parser.add_argument("--micro-batch", type=int, default=8,
                        help="the first micro-batch of the sweep (8, then 32, 64, 16)")
    parser.add_argument("--accum", type=int, default=32,
                        help="its iterations per optimizer step: micro-batch x accum is the "
                             "global batch each micro-batch of the sweep keeps (256)")
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--iters", type=int, default=96,
                        help="iterations of the first micro-batch's runs (the others run as many "
                             "optimizer steps): the first --accum are warm-up")
    parser.add_argument("--check-steps", type=int, default=8)
    parser.add_argument("--workers", type=int, default=None,
                        help="data loader workers of the figure runs. Defaults to 4 (--tiny: 0)")
    parser.add_argument("--compile-backend", default=None,
                        help="torch.compile backend of graph mode. Defaults to inductor "
                             "(--tiny: aot_eager, no code generation)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds after which no new run starts. Defaults to 480 (--tiny: "
                             "1800)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="runs at a time. Defaults to 1 (--tiny on a CPU: 2; a GPU runs one "
                             "at a time)")
    parser.add_argument("--run-timeout", type=float, default=300)
    parser.add_argument("--keep", metavar="DIR", help="keep work dirs and logs here")
    args = parser.parse_args(argv)
    if args.budget is None:
        args.budget = 1800.0 if args.tiny else 480.0
    if args.iters < 2 * args.accum:
        parser.error(f"--iters {args.iters} must be at least 2 x --accum ({2 * args.accum}): "
                     f"the first logged interval is warm-up")
    return args


def _write(text: str, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _start(run: Run, p: Pass, args: argparse.Namespace, work_root: str,
           start: float) -> dict[str, Any]:
    """One run of ``p``, or why it is skipped (the pass's reason, or the spent budget)."""
    elapsed = time.monotonic() - start
    if p.skip:
        return dict(name=run.name, status="skipped", error=p.skip)
    if elapsed > args.budget:
        return dict(name=run.name, status="skipped",
                    error=f"the --budget of {args.budget:.0f} s was spent")
    print(f"[{elapsed:4.0f} s] {run.name} ...", flush=True)
    left = args.budget - elapsed + 60  # a run may end a minute after the budget
    r = execute(run, work_root, min(args.run_timeout, left))
    print(f"[{time.monotonic() - start:4.0f} s] {run.name}: {r['status']} in {r['seconds']:.0f} s"
          + (f": {r['error']}\n{r['tail'][-1500:]}" if r["status"] != "ok" else ""), flush=True)
    return r


def run_plan(plan: Plan, args: argparse.Namespace, work_root: str, peak: float | None,
             ) -> tuple[list[dict], dict[str, dict]]:
    """Each pass's runs in order (a run shared by two passes runs once; ``--jobs`` > 1: that
    many at a time, for --tiny on a CPU), then each pass's entry."""
    from concurrent.futures import ThreadPoolExecutor

    start = time.monotonic()
    order = list(dict.fromkeys((name, p) for p in plan.passes for name in p.runs).keys())
    first = {}
    for name, p in order:
        first.setdefault(name, p)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {name: pool.submit(_start, plan.runs[name], p, args, work_root, start)
                   for name, p in first.items()}
        results = {name: f.result() for name, f in futures.items()}
    matmul = results.get("matmul", {}).get("probe", {}).get("tflops")
    # tiny shapes say nothing about speed: no target to meet
    target = None if args.tiny else args.target_tflops
    return [evaluate(p, results, peak, target, matmul) for p in plan.passes], results


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    if args.tiny and args.device == "cuda" and not cuda:
        print("error: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    # full size needs a GPU: elsewhere the plan is printed, as the GPU would run it
    dry = args.dry_run or (not args.tiny and (not cuda or args.device == "cpu"))
    why = "--dry-run" if args.dry_run else (
        f"no CUDA device here (torch {torch.__version__})" if not cuda else "--device cpu")
    args.device = "cuda" if not args.tiny else args.device or ("cuda" if cuda else "cpu")
    if args.jobs is None:
        args.jobs = 2 if args.tiny and args.device == "cpu" else 1
    plan = build_plan(args)
    markdown = args.markdown or str(Path(args.out).with_suffix(".md"))
    report: dict[str, Any] = dict(
        benchmark="benchmarks/gpu.py", date=datetime.datetime.now().isoformat(timespec="seconds"),
        torch=torch.__version__, cuda=torch.version.cuda, measured=not dry,
        settings=plan.settings, target_tflops=args.target_tflops, rtol=RTOL,
        plan=[dict(asdict(p), commands=[shlex.join(plan.runs[r].argv("WORK")) for r in p.runs])
              for p in plan.passes])
    if dry:
        print(f"benchmarks/gpu.py: {why}, so nothing is measured and nothing is trained.\n"
              f"On one GPU it runs these passes, in order (WORK: a temporary folder):")
        print_plan(plan, "WORK")
        _write(json.dumps(report, indent=1, default=str), args.out)
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
    report |= dict(commit=_commit(), device=name or "cpu", peak_tflops=peak, peak_source=source, passes=entries,
                   runs=results, seconds=time.monotonic() - start)
    print_report(entries)
    table = markdown_table(report)
    _write(json.dumps(report, indent=1, default=str), args.out)
    _write(table, markdown)
    print(f"\n{table}")
    failed = [e["name"] for e in entries if e["status"] not in ("ok", "skipped", "slow kernel")]
    if failed or args.keep:
        print(f"Logs: {work_root}")
    else:
        shutil.rmtree(work_root, ignore_errors=True)
    print(f"Report: {args.out}, table: {markdown}; {time.monotonic() - start:.0f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
