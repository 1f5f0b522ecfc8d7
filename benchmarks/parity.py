"""The parity matrix: each parallel layout, run as a user runs it, against one process.

Every run is ``tools/train.py`` (one process) or ``torchrun ... tools/train.py`` (several), on a
shipped text config (``configs/gpt2_tiny.py``, ``configs/bert_tiny.py``, ``configs/llama_tiny.py``)
with its own data set and loaders, shrunk (2 layers, hidden 64, dropout 0, a few steps); Llama
runs the rows its own layers change (tp, fsdp: :data:`MODEL_LAYOUTS`). Each layout is compared with
one process that trains on the same global batch, on:

- **loss**: the logged training loss of every step (scalars.jsonl), largest relative difference;
- **weights**: the final checkpoint's weights (a sharded one gathered with DCP's own reader),
  largest absolute difference;
- **metrics**: validation and test metrics, largest relative difference (of a perplexity, that of
  its logarithm: the mean loss it is the exponential of);
- **samples**: the samples each evaluation counted (its log line), which must equal the size of
  the set (or of its first batches, when limited): every sample once, whatever the layout.

The processes of a layout split the global batch of training and of evaluation alike, so the
first N evaluation batches of each process hold the samples of one process's first N batches.

A layout passes when loss, weights and metrics are within its tolerance (:data:`LAYOUTS`) and the
samples are right. ``--check`` exits 1 otherwise. The table in docs/parallel.md is
``--markdown``'s output (tests/parallel/test_parity.py holds them equal). The suite runs the rows
the table's last column names, for that model, on the validation set only and on its first 2
batches, except one row per evaluation path on the whole set (``--suite``: :data:`Layout`
``full_val``); without options the script runs every 2-process row of each model on the whole
validation and test sets, the 4-process rows by hand (``--layouts fsdp+tp hsdp``).

How it runs: each one-process reference (fp32, accumulating, bf16) trains once per model in this
process (``tools/train.py``'s main); then one ``torchrun`` launch per model and process count
trains all of that model's rows one after another in one process group (:func:`driver`, each
row through ``tools/train.py``'s main; graph rows compile anew).

    python benchmarks/parity.py [--models gpt2 bert llama] [--layouts ddp tp ...] [--steps 6]
        [--suite] [--check] [--json OUT] [--markdown]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# The shipped configs, shrunk: the same data sets and loaders, a smaller model, no dropout.
MODELS = {
    "gpt2": ("configs/gpt2_tiny.py", [
        "model.num_layers=2", "model.hidden_size=64", "model.num_heads=4",
        "model.hidden_dropout=0.0", "model.attention_dropout=0.0"]),
    "bert": ("configs/bert_tiny.py", [
        "model.num_layers=2", "model.hidden_size=64", "model.num_heads=2",
        "model.ffn_hidden_size=256", "model.hidden_dropout=0.0", "model.attention_dropout=0.0"]),
    # 4 query heads over 2 key/value heads (tensor parallel gives each process 2 and 1), SwiGLU
    # 8H/3 wide rounded up to 256 (Llama's rule); no dropout to turn off
    "llama": ("configs/llama_tiny.py", [
        "model.num_layers=2", "model.hidden_size=64", "model.num_heads=4", "model.num_kv_heads=2",
        "model.ffn_hidden_size=256"]),
}
NAMES = {"gpt2": "GPT-2", "bert": "BERT", "llama": "Llama"}
# The layouts a model runs, where not all: Llama shares GPT-2's data path and steps, so only
# what its own layers change (the split of query and key/value heads, its FSDP blocks)
MODEL_LAYOUTS = {"llama": ("tp", "fsdp", "pp", "pp+gpipe")}
# samples per optimizer step and micro-step, over all processes; evaluation batches too (the
# same shapes: a compiled row does not compile again for another batch size)
GLOBAL_BATCH = 8
SUITE_VAL_BATCHES = 2  # what the suite evaluates, except on full_val rows
# a whole set is evaluated in batches of this many over all processes: fewer batches, the same
# samples (429 = 6 x 64 + 45: the last batch is still a short one)
WHOLE_SET_BATCH = 64


@dataclass(frozen=True)
class Layout:
    """One row of the matrix: how the processes split the work, and against what it is held."""

    nproc: int
    options: tuple[str, ...] = ()  # --cfg-options of the run
    flags: tuple[str, ...] = ()  # tools/train.py flags
    data_shares: int = 1  # data-parallel size: the per-process batch is GLOBAL_BATCH / this
    reference: str = "fp32"  # the one-process run it is compared with (REFERENCES)
    # fp32: a layout sums the same products in another order (microbatches, split matmuls), and
    # AdamW turns a rounding difference in a near-zero gradient into up to lr per step on that
    # element: Llama's pp row gives 1.05e-5 on 2 of 16,384 elements on an AVX-512 CPU (3.0e-6 on
    # AVX2). A layout that is wrong is 1e-3 to 1e-2 away (tensor-parallel ranks on different
    # batches: 1.5e-2).
    tolerance: float = 2e-5
    note: str = ""
    suite: tuple[str, ...] = ()  # the models tests/parallel/test_parity.py runs it for
    full_val: tuple[str, ...] = ()  # of those, the ones it evaluates on the whole set


_AOT = "+optim_wrapper.compile.backend=aot_eager"  # graph mode without the C++ build
# ``suite``: the models tests/parallel/test_parity.py runs the row for, validation set only (the
# CI machine's 2 cores cannot afford every pair; `python benchmarks/parity.py` runs them all):
# BERT where its masked-token loss matters (data parallel, accumulation). fsdp and fsdp+ac are
# in the suite through fsdp+graph and tests/parallel/test_parallel.py (activation checkpointing
# bit-identical), and run here by hand. ``full_val``: one row per evaluation path on the whole
# validation set (each process its share: ddp; every process all of it: tp; the last stage's
# merged microbatches: pp); the other suite rows evaluate its first 2 batches.
_GPT, _BERT = ("gpt2",), ("bert",)
LAYOUTS = {
    "ddp": Layout(2, data_shares=2, suite=_BERT, full_val=_BERT),
    "fsdp": Layout(2, ("parallel.fsdp=2",), data_shares=2),
    "tp": Layout(2, ("parallel.tensor=2",), suite=("gpt2", "llama"), full_val=_GPT),
    "fsdp+ac": Layout(2, ("parallel.fsdp=2", "activation_checkpointing=blocks"), data_shares=2),
    "ddp+acc2": Layout(2, ("+optim_wrapper.accumulative_counts=2",), data_shares=2,
                       reference="acc2", suite=_BERT),
    # FSDP2 gathers once per window: no reduce-scatter, no reshard between micro-batches
    "fsdp+acc2": Layout(2, ("parallel.fsdp=2", "+optim_wrapper.accumulative_counts=2"),
                        data_shares=2, reference="acc2", note="gathered once per step",
                        suite=_BERT),
    "fsdp+graph": Layout(2, ("parallel.fsdp=2", _AOT), ("--graph",), data_shares=2,
                         note="compiled per block, aot_eager backend", suite=_GPT),
    "tp+graph": Layout(2, ("parallel.tensor=2", _AOT), ("--graph",),
                       note="compiled per block, aot_eager backend", suite=_GPT),
    "ddp+bf16": Layout(2, (), ("--amp",), data_shares=2, reference="bf16", tolerance=1e-2,
                       note="bf16 autocast", suite=_GPT),
    "pp": Layout(2, ("parallel.pipeline=2",), note="1F1B, 8 microbatches of 1",
                 suite=("gpt2", "bert", "llama"), full_val=_GPT),
    "pp+gpipe": Layout(2, ("parallel.pipeline=2", "parallel.pipeline_schedule=gpipe"),
                       note="8 microbatches of 1", suite=_GPT),
    "pp+acc2": Layout(2, ("parallel.pipeline=2", "+optim_wrapper.accumulative_counts=2"),
                      reference="acc2", note="1F1B", suite=_BERT),
    "pp+graph": Layout(2, ("parallel.pipeline=2", _AOT), ("--graph",),
                       note="each stage's blocks compiled, aot_eager backend", suite=()),
    "pp+ac": Layout(2, ("parallel.pipeline=2", "activation_checkpointing=blocks"), suite=()),
    "fsdp+tp": Layout(4, ("parallel.fsdp=2", "parallel.tensor=2"), data_shares=2, suite=()),
    "hsdp": Layout(4, ("parallel.data=2", "parallel.fsdp=2"), data_shares=4, suite=()),
    "pp+ddp": Layout(4, ("parallel.pipeline=2",), data_shares=2, suite=()),
    "pp+fsdp": Layout(4, ("parallel.pipeline=2", "parallel.fsdp=2"), data_shares=2, suite=()),
    "pp+tp": Layout(4, ("parallel.pipeline=2", "parallel.tensor=2"), suite=()),
}
# The one-process runs: (extra options, flags)
REFERENCES = {
    "fp32": ((), ()),
    "acc2": (("+optim_wrapper.accumulative_counts=2",), ()),
    "bf16": ((), ("--amp",)),
}


@dataclass
class Run:
    losses: dict[int, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)
    weights: dict = field(default_factory=dict)
    effective_batch: int | None = None
    compiled_blocks: int | None = None  # graph mode: the blocks its end-of-run report counts
    seconds: float = 0.0


@dataclass(frozen=True)
class Plan:
    """What every run of one matrix shares: steps, the sets evaluated, and how much of them."""

    steps: int = 6
    stages: tuple[str, ...] = ("val", "test")
    val_batches: int | None = None  # None: the whole set; else the first N batches per process


def train_argv(model: str, work: Path, plan: Plan, options: tuple[str, ...],
               flags: tuple[str, ...], data_shares: int, full: bool) -> list[str]:
    """The arguments of ``tools/train.py`` for one run: the shipped config shrunk, the global
    batch split over the data shares (in training and evaluation alike, so that N processes
    evaluating their first batches see the samples one process sees in its first batches; a
    whole set goes in batches of :data:`WHOLE_SET_BATCH`)."""
    config, shrink = MODELS[model]
    batch = GLOBAL_BATCH // data_shares
    whole = full or plan.val_batches is None
    limit = () if whole else (
        f"val_cfg.limit_batches={plan.val_batches}", f"test_cfg.limit_batches={plan.val_batches}")
    eval_batch = (WHOLE_SET_BATCH if whole else GLOBAL_BATCH) // data_shares
    sets = (f"val_dataloader.batch_size={eval_batch}",
            *((f"test_dataloader.batch_size={eval_batch}",) if "test" in plan.stages
              else ("test_dataloader=None", "test_evaluator=None")))
    return [str(ROOT / config), "--work-dir", str(work), *flags, "--cfg-options", *shrink,
            f"train_cfg.max_iters={plan.steps}", f"train_cfg.val_interval={plan.steps}",
            f"train_dataloader.batch_size={batch}",
            *sets, *limit, "default_hooks.logger.interval=1",
            f"default_hooks.checkpoint.interval={plan.steps}",
            "default_hooks.checkpoint.save_best=None", "+default_hooks.logger.plot=False",
            # FlopCounterMode decomposes an op it has no formula for (Llama's silu backward)
            # on the counted step, ~1e-9 from the fused kernel, and a pipeline counts nothing:
            # the rows would differ by the counter, not by the layout
            "+default_hooks.throughput.count_flops=False", *options]


def read_run(work: Path, output: str, plan: Plan) -> Run:
    """What a run logged (scalars.jsonl, its evaluation lines) and its final weights."""
    run = Run()
    scalars = next(work.glob("*/scalars.jsonl"))
    for line in scalars.read_text().splitlines():
        row = json.loads(line)
        if "train/loss" in row:
            run.losses[row["step"]] = row["train/loss"]
        run.metrics.update({k: v for k, v in row.items() if k.startswith(("val/", "test/"))})
    patterns = {"val": r"Iter\(val\) .*samples: (\d+)", "test": r"Test \(iteration .*samples: (\d+)"}
    for stage in plan.stages:
        found = re.findall(patterns[stage], output)
        run.samples[stage] = int(found[-1]) if found else -1
    found = re.search(r"effective batch size .* = (\d+)", output)
    run.effective_batch = int(found.group(1)) if found else None
    found = re.search(r"Graph mode \(end of run\), (\d+) blocks compiled one by one", output)
    run.compiled_blocks = int(found.group(1)) if found else None
    run.weights = final_weights(work / f"iter_{plan.steps}.pth")
    return run


def _capture(fn: Callable[[], Any]) -> tuple[int, str]:
    """``fn()`` with its output captured: (exit status as tools/train.py gives it, output)."""
    from libai.utils.errors import LibaiError

    out = io.StringIO()
    status = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            fn()
        except LibaiError as e:
            print(f"error: {e}", file=sys.stderr)
            status = 2
    return status, out.getvalue()


def train_here(argv: list[str]) -> tuple[int, str]:
    """One process: ``tools/train.py``'s main in this process, one thread (as the launched
    ranks have), output captured."""
    import torch

    from libai.cli.train import main as train_main

    torch.set_num_threads(1)
    return _capture(lambda: train_main(argv))


def launch(nproc: int, args: list[str]) -> tuple[int, str]:
    """``torchrun --standalone --nproc_per_node NPROC ARGS``, one thread per process."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", *args]
    out = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"),
                         capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


def driver(rows_file: str) -> int:
    """Under torchrun: train the rows of ``rows_file`` one after another, each through
    ``tools/train.py``'s main, in one process group (one launch for a model's rows, not one per
    row). Each rank writes ``<log>.<rank>.json`` (status and output) for each row it trained;
    the first row that fails ends the launch."""
    import torch

    from libai.cli.train import main as train_main
    from libai.utils.dist import destroy_dist, get_rank, init_dist

    torch.set_num_threads(1)
    init_dist()
    status = 0
    for row in json.loads(Path(rows_file).read_text()):
        if "torch._dynamo" in sys.modules:  # each row compiles anew, as its own process would
            torch._dynamo.reset()
        start = time.perf_counter()
        status, output = _capture(lambda row=row: train_main(row["argv"]))
        Path(f"{row['log']}.{get_rank()}.json").write_text(
            json.dumps(dict(status=status, output=output, seconds=time.perf_counter() - start)))
        if status:
            break
    destroy_dist(status)
    return status


def run_rows(model: str, nproc: int, rows: dict[str, list[str]], work: Path,
             launcher: Callable[[int, list[str]], tuple[int, str]]
             ) -> dict[str, tuple[int, str, float]]:
    """One launch of ``nproc`` processes for ``rows`` (name -> train arguments): each row's
    exit status, output (rank 0's; every rank's and the launch's for a row that failed or did
    not finish) and seconds."""
    spec = [dict(argv=argv, log=str(work / f"{name}.log")) for name, argv in rows.items()]
    rows_file = work / f"{model}-{nproc}.json"
    rows_file.write_text(json.dumps(spec))
    status, launch_output = launcher(nproc, [str(Path(__file__).resolve()), "--driver",
                                             str(rows_file)])
    out = {}
    for name, row in zip(rows, spec, strict=True):
        ranks = [Path(f"{row['log']}.{r}.json") for r in range(nproc)]
        done = [json.loads(f.read_text()) for f in ranks if f.exists()]
        row_status = max((d["status"] for d in done), default=0)
        if len(done) == nproc and row_status == 0:
            out[name] = (0, done[0]["output"], max(d["seconds"] for d in done))
            continue
        outputs = "\n".join(d["output"][-3000:] for d in done)
        out[name] = (row_status or status or 1, f"{outputs}\n{launch_output[-3000:]}", 0.0)
    return out


def final_weights(path: Path) -> dict:
    """The model weights of a checkpoint, whole tensors (a sharded one read with DCP)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from libai.checkpoint import load_checkpoint
    from libai.checkpoint.sharded import check_sharded

    ckpt = load_checkpoint(path)
    if "sharded" not in ckpt:
        return ckpt["state_dict"]
    folder = check_sharded(path, ckpt["sharded"])
    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(str(folder), os.path.join(tmp, "full.pt"))
        return torch.load(os.path.join(tmp, "full.pt"), weights_only=True)["model"]


@functools.cache
def set_sizes(model: str) -> dict[str, int]:
    """The sizes of the validation and test sets, from the config's own loaders."""
    from libai.config import Config
    from libai.data import build_dataloader

    cfg = Config.fromfile(ROOT / MODELS[model][0])
    return {stage: len(build_dataloader(cfg[f"{stage}_dataloader"], seed=0).dataset)
            for stage in ("val", "test")}


def expected_samples(model: str, plan: Plan, full: bool) -> dict[str, int]:
    """The samples each evaluation must count: the whole set, or its first batches."""
    sizes = set_sizes(model)
    if full or plan.val_batches is None:
        return {stage: sizes[stage] for stage in plan.stages}
    return {stage: min(sizes[stage], plan.val_batches * GLOBAL_BATCH)
            for stage in plan.stages}


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def _nan_last(value: float) -> float:
    """A missing value (NaN) as the worst difference."""
    return math.inf if math.isnan(value) else value


def _metric_diff(key: str, a: float, b: float) -> float:
    """Relative difference; a perplexity's of its logarithm (the loss it is the exp of)."""
    if "perplexity" in key and a > 0 and b > 0:
        return _rel(math.log(a), math.log(b))
    return _rel(a, b)


def compare(run: Run, ref: Run, sizes: dict[str, int]) -> dict:
    """The largest differences of ``run`` from ``ref``."""
    losses = [_rel(run.losses.get(s, math.nan), v) for s, v in ref.losses.items()]
    keys = sorted(set(ref.weights) | set(run.weights))
    weights = max(((run.weights[k].float() - ref.weights[k].float()).abs().max().item()
                   if k in run.weights and k in ref.weights else math.inf) for k in keys)
    metrics = {k: _metric_diff(k, run.metrics.get(k, math.nan), v) for k, v in ref.metrics.items()}
    worst = max(metrics, key=lambda k: _nan_last(metrics[k]))
    return {"loss": max(map(_nan_last, losses)), "weights": weights, "metrics": metrics[worst], "worst": worst,
            "steps": len(ref.losses), "samples": dict(run.samples), "sizes": sizes,
            "effective_batch": (run.effective_batch, ref.effective_batch),
            "compiled_blocks": run.compiled_blocks}


def passes(result: dict, layout: Layout) -> bool:
    worst = max(_nan_last(result[k]) for k in ("loss", "weights", "metrics"))
    return (worst <= layout.tolerance
            and result["samples"] == result["sizes"]
            and len(set(result["effective_batch"])) == 1)


def runs(model: str, layout: str) -> bool:
    """Whether the matrix has the row ``layout`` for ``model`` (:data:`MODEL_LAYOUTS`)."""
    return layout in MODEL_LAYOUTS.get(model, LAYOUTS)


def markdown() -> str:
    """The table of docs/parallel.md: what is compared, against what, within what."""
    rows = ["| layout | processes | models | compared with one process | tolerance | in the suite |",
            "|---|---|---|---|---|---|"]
    for name, lay in LAYOUTS.items():
        ref = {"fp32": "fp32", "acc2": "fp32, accumulating 2 micro-batches",
               "bf16": "bf16 autocast"}[lay.reference]
        opts = ", ".join(f"`{o}`" for o in (*lay.flags, *(o for o in lay.options if o != _AOT)))
        note = f" ({lay.note})" if lay.note else ""
        models = ", ".join(NAMES[m] for m in MODELS if runs(m, name))
        by = ", ".join(NAMES[m] + (" (whole set)" if m in lay.full_val else "")
                       for m in lay.suite) or "by hand"
        rows.append(f"| {name}: {opts or 'torchrun alone'}{note} | {lay.nproc} | {models} | "
                    f"{ref} | {lay.tolerance:g} | {by} |")
    return "\n".join(rows)


def run_matrix(models: list[str], layouts: list[str], plan: Plan, work: Path, suite: bool = False,
               train_one: Callable[[list[str]], tuple[int, str]] = train_here,
               launcher: Callable[[int, list[str]], tuple[int, str]] = launch,
               report: Callable[[str], None] = print) -> dict[str, dict]:
    """Each model's rows against one process: the one-process references trained once each
    (``train_one``: ``tools/train.py``'s main), then one launch per process count for all of a
    model's rows (``launcher`` runs :func:`driver` under torchrun). ``suite``: only the rows
    the suite runs for each model, on ``plan.val_batches`` batches except the rows whose
    ``full_val`` names the model."""
    results: dict[str, dict] = {}
    for model in models:
        names = [n for n in layouts if runs(model, n) and (not suite or model in LAYOUTS[n].suite)]
        full = {n: not suite or model in LAYOUTS[n].full_val for n in names}
        refs: dict[tuple[str, bool], Run] = {}
        for kind, whole in dict.fromkeys((LAYOUTS[n].reference, full[n]) for n in names):
            options, flags = REFERENCES[kind]
            folder = work / f"{model}-reference-{kind}{'' if whole else '-limited'}"
            start = time.perf_counter()
            status, output = train_one(train_argv(model, folder, plan, options, flags, 1, whole))
            report(f"{model:<6} reference {kind}{'' if whole else ' (limited)'}: "
                   f"{time.perf_counter() - start:.0f} s")
            if status:
                raise RuntimeError(f"the one-process {kind} run of {model} exited {status}:\n"
                                   f"{output[-3000:]}")
            refs[kind, whole] = read_run(folder, output, plan)
        for nproc in sorted({LAYOUTS[n].nproc for n in names}):
            rows = {n: train_argv(model, work / f"{model}-{n}", plan, LAYOUTS[n].options,
                                  LAYOUTS[n].flags, LAYOUTS[n].data_shares, full[n])
                    for n in names if LAYOUTS[n].nproc == nproc}
            start = time.perf_counter()
            done = run_rows(model, nproc, rows, work, launcher)
            report(f"{model:<6} {nproc} processes, {len(rows)} rows in one launch: "
                   f"{time.perf_counter() - start:.0f} s")
            for name, (status, output, seconds) in done.items():
                lay, key = LAYOUTS[name], f"{model}/{name}"
                if status:
                    results[key] = {"ok": False, "error": f"exited {status}:\n{output}"}
                    report(f"{model:<6} {name:<11} failed (exit {status}):\n{output[-2000:]}")
                    continue
                run = read_run(work / f"{model}-{name}", output, plan)
                sizes = expected_samples(model, plan, full[name])
                result = compare(run, refs[lay.reference, full[name]], sizes)
                result["ok"] = passes(result, lay)
                results[key] = result
                seen = ", ".join(f"{result['samples'][s]}/{sizes[s]}" for s in plan.stages)
                report(f"{model:<6} {name:<11} {result['loss']:9.1e} {result['weights']:9.1e} "
                       f"{result['metrics']:9.1e} {lay.tolerance:9.0e}  {seen:<19}  "
                       f"{'yes' if result['ok'] else 'NO':<3} {seconds:4.0f} s")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--layouts", nargs="+", choices=list(LAYOUTS),
                        default=[n for n, lay in LAYOUTS.items() if lay.nproc == 2])
    parser.add_argument("--suite", action="store_true",
                        help="what the test suite runs: each layout's suite models, the "
                             "validation set only, its first 2 batches except full_val rows")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--check", action="store_true", help="exit 1 if a layout fails")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--markdown", action="store_true", help="print the docs table and exit")
    parser.add_argument("--driver", metavar="ROWS", help=argparse.SUPPRESS)  # under torchrun
    args = parser.parse_args(argv)
    if args.driver:
        return driver(args.driver)
    if args.markdown:
        print(markdown())
        return 0
    plan = Plan(args.steps, ("val",), SUITE_VAL_BATCHES) if args.suite else Plan(args.steps)
    print(f"{'model':<6} {'layout':<11} {'loss':>9} {'weights':>9} {'metrics':>9} "
          f"{'tolerance':>9}  samples (val, test)  ok  time", flush=True)
    with tempfile.TemporaryDirectory(prefix="libai-parity-") as tmp:
        results = run_matrix(args.models, args.layouts, plan, Path(tmp), suite=args.suite,
                             report=lambda line: print(line, flush=True))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    failed = [key for key, result in results.items() if not result["ok"]]
    if failed:
        print(f"outside tolerance: {', '.join(failed)}")
    return 1 if failed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
