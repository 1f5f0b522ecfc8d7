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
  the set: every sample once, whatever the layout.

A layout passes when loss, weights and metrics are within its tolerance (:data:`LAYOUTS`) and the
samples are right. ``--check`` exits 1 otherwise. The table in docs/parallel.md is
``--markdown``'s output (tests/parallel/test_parity.py holds them equal). The suite runs the rows
the table's last column names, for that model, on the validation set only (``--suite``); without
options the script runs every 2-process row of each model, the 4-process rows by hand
(``--layouts fsdp+tp hsdp``).

    python benchmarks/parity.py [--models gpt2 bert llama] [--layouts ddp tp ...] [--steps 6]
        [--check] [--json OUT] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

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
GLOBAL_BATCH = 8  # samples per optimizer step and micro-step, over all processes


@dataclass(frozen=True)
class Layout:
    """One row of the matrix: how the processes split the work, and against what it is held."""

    nproc: int
    options: tuple[str, ...] = ()  # --cfg-options of the run
    flags: tuple[str, ...] = ()  # tools/train.py flags
    data_shares: int = 1  # data-parallel size: the per-process batch is GLOBAL_BATCH / this
    reference: str = "fp32"  # the one-process run it is compared with (REFERENCES)
    tolerance: float = 1e-5
    note: str = ""
    suite: tuple[str, ...] = ()  # the models tests/parallel/test_parity.py runs it for


_AOT = "+optim_wrapper.compile.backend=aot_eager"  # graph mode without the C++ build
# ``suite``: the models tests/parallel/test_parity.py runs the row for, validation set only (the
# CI machine's 2 cores cannot afford every pair; `python benchmarks/parity.py` runs them all):
# BERT where its masked-token loss matters (data parallel, accumulation). fsdp and fsdp+ac are
# in the suite through fsdp+graph and tests/parallel/test_parallel.py (activation checkpointing
# bit-identical), and run here by hand.
_GPT, _BERT = ("gpt2",), ("bert",)
LAYOUTS = {
    "ddp": Layout(2, data_shares=2, suite=_BERT),
    "fsdp": Layout(2, ("parallel.fsdp=2",), data_shares=2),
    "tp": Layout(2, ("parallel.tensor=2",), suite=("gpt2", "llama")),
    "fsdp+ac": Layout(2, ("parallel.fsdp=2", "activation_checkpointing=blocks"), data_shares=2),
    "ddp+acc2": Layout(2, ("+optim_wrapper.accumulative_counts=2",), data_shares=2,
                       reference="acc2", suite=_BERT),
    "fsdp+graph": Layout(2, ("parallel.fsdp=2", _AOT), ("--graph",), data_shares=2,
                         note="compiled per block, aot_eager backend", suite=_GPT),
    "tp+graph": Layout(2, ("parallel.tensor=2", _AOT), ("--graph",),
                       note="compiled per block, aot_eager backend", suite=_GPT),
    "ddp+bf16": Layout(2, (), ("--amp",), data_shares=2, reference="bf16", tolerance=1e-2,
                       note="bf16 autocast", suite=_GPT),
    "pp": Layout(2, ("parallel.pipeline=2",), note="1F1B, 8 microbatches of 1",
                 suite=("gpt2", "bert", "llama")),
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
# The one-process runs: (batch per micro-step, extra options, flags)
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
    seconds: float = 0.0


def train(model: str, work: Path, steps: int, nproc: int, options: tuple[str, ...],
          flags: tuple[str, ...], batch: int, stages: tuple[str, ...] = ("val", "test")) -> Run:
    """One training run through the user's entry point; what it logged and saved."""
    config, shrink = MODELS[model]
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] \
        if nproc > 1 else []
    cmd = [sys.executable, *launcher, str(ROOT / "tools" / "train.py"), str(ROOT / config),
           "--work-dir", str(work), *flags, "--cfg-options", *shrink,
           f"train_cfg.max_iters={steps}", f"train_cfg.val_interval={steps}",
           f"train_dataloader.batch_size={batch}", "default_hooks.logger.interval=1",
           f"default_hooks.checkpoint.interval={steps}", "default_hooks.checkpoint.save_best=None",
           "+default_hooks.logger.plot=False",
           *options, *(() if "test" in stages else ("test_dataloader=None", "test_evaluator=None"))]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=work.parent, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\nexited {out.returncode}:\n{out.stderr[-3000:]}")
    run = Run(seconds=time.perf_counter() - start)
    scalars = next(work.glob("*/scalars.jsonl"))
    for line in scalars.read_text().splitlines():
        row = json.loads(line)
        if "train/loss" in row:
            run.losses[row["step"]] = row["train/loss"]
        run.metrics.update({k: v for k, v in row.items() if k.startswith(("val/", "test/"))})
    patterns = {"val": r"Iter\(val\) .*samples: (\d+)", "test": r"Test \(iteration .*samples: (\d+)"}
    for stage, pattern in ((s, patterns[s]) for s in stages):
        found = re.findall(pattern, out.stdout)
        run.samples[stage] = int(found[-1]) if found else -1
    found = re.search(r"effective batch size .* = (\d+)", out.stdout)
    run.effective_batch = int(found.group(1)) if found else None
    run.weights = final_weights(work / f"iter_{steps}.pth")
    return run


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


def set_sizes(model: str, stages: tuple[str, ...] = ("val", "test")) -> dict[str, int]:
    """The sizes of the validation and test sets, from the config's own loaders."""
    from libai.config import Config
    from libai.data import build_dataloader

    cfg = Config.fromfile(ROOT / MODELS[model][0])
    return {stage: len(build_dataloader(cfg[f"{stage}_dataloader"], seed=0).dataset)
            for stage in stages}


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
            "effective_batch": (run.effective_batch, ref.effective_batch)}


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
        by = f"{', '.join(NAMES[m] for m in lay.suite)}" if lay.suite else "by hand"
        rows.append(f"| {name}: {opts or 'torchrun alone'}{note} | {lay.nproc} | {models} | "
                    f"{ref} | {lay.tolerance:g} | {by} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--layouts", nargs="+", choices=list(LAYOUTS),
                        default=[n for n, lay in LAYOUTS.items() if lay.nproc == 2])
    parser.add_argument("--suite", action="store_true",
                        help="the pairs the test suite runs (each layout's suite models)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--check", action="store_true", help="exit 1 if a layout fails")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--markdown", action="store_true", help="print the docs table and exit")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown())
        return 0
    results, failed = {}, []
    stages = ("val",) if args.suite else ("val", "test")  # the suite's cheap form: no test set
    print(f"{'model':<6} {'layout':<11} {'loss':>9} {'weights':>9} {'metrics':>9} "
          f"{'tolerance':>9}  samples (val, test)  ok  time")
    with tempfile.TemporaryDirectory(prefix="libai-parity-") as tmp:
        for model in args.models:
            sizes, refs = set_sizes(model, stages), {}
            for name in args.layouts:
                lay = LAYOUTS[name]
                if (args.suite and model not in lay.suite) or not runs(model, name):
                    continue
                try:
                    if lay.reference not in refs:
                        options, flags = REFERENCES[lay.reference]
                        refs[lay.reference] = train(model, Path(tmp, f"{model}-{lay.reference}"),
                                                    args.steps, 1, options, flags, GLOBAL_BATCH,
                                                    stages)
                    run = train(model, Path(tmp, f"{model}-{name}"), args.steps, lay.nproc,
                                lay.options, lay.flags, GLOBAL_BATCH // lay.data_shares, stages)
                except RuntimeError as e:  # a run that fails is a row that fails
                    print(f"{model:<6} {name:<11} failed: {e}", flush=True)
                    results[f"{model}/{name}"] = {"ok": False, "error": str(e)}
                    failed.append(f"{model}/{name}")
                    continue
                result = compare(run, refs[lay.reference], sizes)
                result["ok"] = passes(result, lay)
                results[f"{model}/{name}"] = result
                failed += [] if result["ok"] else [f"{model}/{name}"]
                seen = ", ".join(f"{result['samples'][s]}/{sizes[s]}" for s in stages)
                print(f"{model:<6} {name:<11} {result['loss']:9.1e} {result['weights']:9.1e} "
                      f"{result['metrics']:9.1e} {lay.tolerance:9.0e}  {seen:<19}  "
                      f"{'yes' if result['ok'] else 'NO':<3} {run.seconds:4.0f} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if failed:
        print(f"outside tolerance: {', '.join(failed)}")
    return 1 if failed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
