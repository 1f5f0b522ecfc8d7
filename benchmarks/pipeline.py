"""Pipeline parallel on 2 processes: step time, measured bubble and per-stage memory, per schedule
and microbatch count, against one process training the same model on the same batch.

Every run is ``tools/train.py`` on ``configs/gpt2_tiny.py`` as shipped (4 layers, hidden 128,
sequences of 128 tokens, batch 16), dropout 0, no evaluation, no checkpoint: one process (the
baseline, measured first and again last in the same invocation: these machines are noisy), then
``torchrun --nproc_per_node 2 ... parallel.pipeline=2`` for each ``--schedules`` x
``--microbatches``. ``OMP_NUM_THREADS=1`` everywhere: the baseline computes on one core, the
pipeline on two (one per stage, on the CPU: gloo). Each stage sees the whole batch (no data
parallel), cut into ``m`` microbatches.

Per run it reports:

- **step**: median seconds per training step (``train/time`` of scalars.jsonl, rank 0's, logged
  every step), the first ``--warmup`` steps left out; **speed-up**: the baseline's T1 / T_pp
  (T1: the median of both baseline runs' steps; "last run / first run" above the table says how
  far the machine drifted meanwhile). ``--stat min``: the fastest step instead of the median, the
  least disturbed by other work on a shared machine (which slows a 2-process pipeline more than
  one process: it needs both cores at once). The JSON holds every step's time.
- **bubble, measured**: 1 - T1 / (p x T_pp), p = 2: the share of the pipeline's process-time
  (p processes for T_pp each) not spent on one process's work. It holds the schedule's bubble
  and everything else a pipeline pays: the activations sent and received between stages, each
  microbatch's fixed cost (small matrices run less efficiently than the whole batch), the tied
  embedding's gradient all-reduce and the loss broadcast. **bubble, theory**: (p - 1) / (m + p - 1)
  (:func:`libai.parallel.pipeline.bubble`), the idle share of an ideal schedule with equal stages
  and free communication. The two agree only where those costs are small next to a stage's work,
  and the stages are even. Here they are not quite: the last stage also runs the LM head (hidden x
  8,192 words) and its loss; by a count of the matrix products (forward and backward) a block is
  about 2.8 GFLOP a step and the head about 12.9. The default split balances the stages by
  parameters, the head counted on the last stage (:func:`libai.parallel.pipeline.balanced_split`):
  3 blocks on the first stage, 1 and the head on the last, about 8.4 and 15.7 GFLOP by that
  count: the last stage still holds about two thirds of the work, and the speed-up stays well
  under 2 (an even 2 + 2 split, ``--stage-ids 0 0 1 1``, gives it about three quarters; measured
  2026-11-26 on a loaded machine, 2 + 2 reached 1.0-1.2 where 3 + 1 reached 1.1-1.4).
- **state**, per stage: bytes of parameters, their gradients (one per trainable parameter) and
  the optimizer state (AdamW: two per parameter) the stage's process holds, as a ratio of one
  process's. Exact. With this small a model the tied word embeddings (8,192 x 128, on the first
  stage and the last) are most of it, so each stage holds far more than half.
- **peak**, per stage: what training adds to the process's memory at its peak, as a ratio of one
  process's: on the CPU the peak RSS during training (VmHWM, reset at the start of training via
  /proc/self/clear_refs) minus the RSS when training starts (the model built and cut; the
  interpreter and torch's libraries left out): gradients, optimizer state, activations, send and
  receive buffers. On a GPU, ``torch.cuda.max_memory_allocated`` minus the memory allocated when
  training starts. RSS counts pages, not tensors: memory the allocator kept from before training
  (the pruned blocks of the whole model each process builds) is reused without showing, so the
  CPU figure is rough (a few MiB here).

    python benchmarks/pipeline.py [--schedules gpipe 1f1b] [--microbatches 2 4 8] [--iters 20]
        [--warmup 3] [--stat median|min] [--quick] [--stage-ids 0 0 0 1] [--device cpu|cuda]
        [--json OUT]
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
STAGES = 2  # pipeline processes
SCHEDULES = ("gpipe", "1f1b")
CONFIG = "configs/gpt2_tiny.py"
# --quick: a smaller model and batch for the smoke test (tests/test_pipeline_benchmark.py)
QUICK = dict(num_layers=2, hidden_size=64, num_heads=4, batch=8, iters=6, warmup=2)

# Written next to the generated configs and imported by the runs (custom_hooks, PYTHONPATH): each
# process's memory, as the module docstring describes it, in <out>/memory-rank<rank>.json.
HOOK = '''
import json
import os
import re

import torch

from libai.hooks import Hook


def _status(key):
    """A /proc/self/status figure, in bytes (None where there is none)."""
    try:
        with open("/proc/self/status") as f:
            found = re.search(rf"^{key}:\\s+(\\d+) kB", f.read(), re.M)
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


class PipelineMemoryHook(Hook):
    """Memory at the start of training and at its peak, and the state this process holds."""

    priority = "LOWEST"

    def __init__(self, out):
        self.out = out

    def before_train(self, runner):
        self.cuda = runner.device.type == "cuda"
        if self.cuda:
            torch.cuda.synchronize(runner.device)
            torch.cuda.reset_peak_memory_stats(runner.device)
            self.start = torch.cuda.memory_allocated(runner.device)
            return
        self.start = _status("VmRSS")
        try:  # 5: reset the peak RSS (VmHWM) to the current RSS (Linux >= 4.0)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.reset = True
        except OSError:
            self.reset = False

    def after_train(self, runner):
        if self.cuda:
            torch.cuda.synchronize(runner.device)
            peak = torch.cuda.max_memory_allocated(runner.device)
        else:
            peak = _status("VmHWM") if self.reset else None
        model = runner.unwrapped_model
        params = {id(p): p for p in model.parameters()}.values()
        optimizer = runner.optim_wrapper.optimizer
        optim = sum(v.numel() * v.element_size() for state in optimizer.state.values()
                    for v in state.values() if isinstance(v, torch.Tensor))
        record = dict(
            rank=runner.rank, device=runner.device.type,
            stages=list((runner.execution.stages or ((0,), 1))[0]),
            params=sum(p.numel() * p.element_size() for p in params),
            grads=sum(p.numel() * p.element_size() for p in params if p.requires_grad),
            optim=optim, start=self.start, peak=peak,
        )
        with open(os.path.join(self.out, f"memory-rank{runner.rank}.json"), "w") as f:
            json.dump(record, f)
'''

TEMPLATE = """
_base_ = {base!r}
model = dict(num_layers={num_layers}, hidden_size={hidden_size}, num_heads={num_heads},
             hidden_dropout=0.0, attention_dropout=0.0)
train_dataloader = dict(batch_size={batch})
val_dataloader = None
val_evaluator = None
test_dataloader = None
test_evaluator = None
train_cfg = dict(max_iters={iters}, val_interval={iters})
default_hooks = dict(
    logger=dict(interval=1, progress_bar=False, plot=False, backends=[dict(type="JsonlBackend")]),
    checkpoint=dict(interval=1000, save_last=False, save_best=None))
custom_hooks = [dict(type="pipeline_memory_hook.PipelineMemoryHook", out={out!r})]
device = {device!r}
parallel = {parallel}
"""


def shape(args: argparse.Namespace) -> dict:
    """The model and batch: the shipped config's (read from it), or --quick's."""
    if args.quick:
        return {k: QUICK[k] for k in ("num_layers", "hidden_size", "num_heads", "batch")}
    from libai.config import Config

    cfg = Config.fromfile(ROOT / CONFIG)
    return dict(num_layers=cfg.model.num_layers, hidden_size=cfg.model.hidden_size,
                num_heads=cfg.model.num_heads, batch=cfg.train_dataloader.batch_size)


def train(tmp: Path, name: str, args: argparse.Namespace, model: dict,
          parallel: dict | None) -> dict:
    """One run through the user's entry point: its step times and each process's memory."""
    work = tmp / name
    work.mkdir()
    config = tmp / f"{name.replace('-', '_')}.py"
    config.write_text(TEMPLATE.format(base=str(ROOT / CONFIG), iters=args.iters, out=str(work),
                                      device=args.device, parallel=parallel, **model))
    nproc = STAGES if parallel else 1
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] \
        if nproc > 1 else []
    cmd = [sys.executable, *launcher, str(ROOT / "tools" / "train.py"), str(config),
           "--work-dir", str(work)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp), env.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\nexited {out.returncode}:\n{out.stderr[-3000:]}")
    times = {}
    for line in next(work.glob("*/scalars.jsonl")).read_text().splitlines():
        row = json.loads(line)
        if "train/time" in row:
            times[row["step"]] = row["train/time"]
    memory = [json.loads(p.read_text()) for p in sorted(work.glob("memory-rank*.json"))]
    return dict(times=[times[s] for s in sorted(times) if s > args.warmup], memory=memory,
                seconds=time.perf_counter() - start)


def state(record: dict) -> int:
    """Parameters + gradients + optimizer state, bytes."""
    return record["params"] + record["grads"] + record["optim"]


def growth(record: dict) -> float | None:
    """What training added at its peak, bytes (None where the peak could not be measured)."""
    return None if record["peak"] is None else record["peak"] - record["start"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    from libai.parallel.pipeline import bubble

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", nargs="+", choices=SCHEDULES, default=list(SCHEDULES))
    parser.add_argument("--microbatches", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--iters", type=int, help=f"steps per run (20; --quick {QUICK['iters']})")
    parser.add_argument("--warmup", type=int,
                        help=f"first steps left out of the medians (3; --quick {QUICK['warmup']})")
    parser.add_argument("--stat", choices=("median", "min"), default="median",
                        help="the step time of a run: the median step or the fastest")
    parser.add_argument("--quick", action="store_true",
                        help="2 layers, hidden 64, batch 8, a few steps: the smoke test's size")
    parser.add_argument("--stage-ids", nargs="+", type=int,
                        help="the stage of each block (parallel.pipeline_stage_ids; default: "
                             "balanced, as many blocks on each stage)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: one GPU per process (needs 2)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    args.iters = args.iters or (QUICK["iters"] if args.quick else 20)
    args.warmup = QUICK["warmup"] if args.warmup is None and args.quick else \
        (3 if args.warmup is None else args.warmup)
    if args.iters <= args.warmup:
        parser.error(f"--iters {args.iters} leaves no step after --warmup {args.warmup}")
    model = shape(args)
    bad = [m for m in args.microbatches if m < 1 or model["batch"] % m]
    if bad:
        parser.error(f"--microbatches {bad}: each must divide the batch of {model['batch']}")

    print(f"{CONFIG}: {model['num_layers']} layers, hidden {model['hidden_size']}, batch "
          f"{model['batch']}, {args.iters} steps (median of the last {args.iters - args.warmup}), "
          f"{args.device}, pipeline over {STAGES} processes, blocks "
          f"{'balanced' if args.stage_ids is None else f'on stages {args.stage_ids}'}",
          flush=True)
    stat = statistics.median if args.stat == "median" else min
    rows = []
    with tempfile.TemporaryDirectory(prefix="libai-pipeline-") as tmp:
        tmp = Path(tmp)
        (tmp / "pipeline_memory_hook.py").write_text(HOOK)
        first = train(tmp, "one-first", args, model, None)
        for schedule in args.schedules:
            for m in args.microbatches:
                run = train(tmp, f"{schedule}-{m}", args, model,
                            dict(pipeline=STAGES, pipeline_schedule=schedule, microbatches=m,
                                 pipeline_stage_ids=args.stage_ids))
                rows.append(dict(schedule=schedule, microbatches=m, **run))
                print(f"  {schedule} m={m}: {stat(run['times']) * 1e3:.1f} ms/step "
                      f"({run['seconds']:.0f} s)", flush=True)
        last = train(tmp, "one-last", args, model, None)

    t1 = stat(first["times"] + last["times"])
    one = first["memory"][0]
    one_state, one_growth = state(one), growth(one)
    drift = stat(last["times"]) / stat(first["times"])
    print(f"\none process: {t1 * 1e3:.1f} ms/step ({args.stat}; last run / first run {drift:.2f}); state "
          f"{one_state / 2**20:.1f} MiB; peak over the start of training "
          f"{_fmt(None if one_growth is None else one_growth / 2**20, '.1f')} MiB "
          f"(ratios below are against these)\n")
    head = (f"{'schedule':<9}{'m':>3}{'step ms':>9}{'speed-up':>10}{'bubble':>8}{'theory':>8}"
            + "".join(f"{f'state s{s}':>9}" for s in range(STAGES))
            + "".join(f"{f'peak s{s}':>9}" for s in range(STAGES)))
    print(head)
    results = dict(stat=args.stat, one_process=dict(step=t1, steps_first=first["times"], steps_last=last["times"],
                                    memory=one), rows=[])
    for row in rows:
        t = stat(row["times"])
        by_stage = {r["stages"][0]: r for r in row["memory"]}
        states = [_ratio(state(by_stage[s]), one_state) if s in by_stage else None
                  for s in range(STAGES)]
        peaks = [_ratio(growth(by_stage[s]), one_growth) if s in by_stage else None
                 for s in range(STAGES)]
        result = dict(schedule=row["schedule"], microbatches=row["microbatches"], step=t,
                      speedup=t1 / t, bubble=1 - t1 / (STAGES * t),
                      theory=bubble(STAGES, row["microbatches"]), state=states, peak=peaks,
                      steps=row["times"], memory=row["memory"])
        results["rows"].append(result)
        print(f"{row['schedule']:<9}{row['microbatches']:>3}{t * 1e3:>9.1f}"
              f"{result['speedup']:>10.2f}{result['bubble']:>8.2f}{result['theory']:>8.2f}"
              + "".join(f"{_fmt(v, '.2f'):>9}" for v in states)
              + "".join(f"{_fmt(v, '.2f'):>9}" for v in peaks))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
