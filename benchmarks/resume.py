"""Resume cost against the position inside a long epoch, measured in the same process.

One epoch of ``--samples`` items (each ``__getitem__`` draws and transforms a vector, tens of
microseconds) in batches of ``--batch``. A chain of runs stops at each ``--positions`` fraction of
the first epoch and saves there (every run resumes from the previous stop, so the chain trains
the longest position once). Then, per repeat and position, back to back:

- ours: ``Runner.from_cfg(cfg with resume=path)`` + ``train()`` until the first resumed
  iteration begins (its batch is loaded); a hook stops the run right there;
- naive (in the first ``--naive-repeats`` repeats only: it is slow): what a resume that re-reads
  the skipped batches would add: a DataLoader over the same dataset and sampler, iterated for
  that many batches.

Prints, per position, the checkpoint size, the median seconds of ours (split into build,
checkpoint load, first batch) and of naive, ours / ours at the earliest position (flat = 1.0) and
naive / ours (medians of the per-repeat ratios: this machine is noisy, so only ratios of paired
runs are compared). The earliest checkpoint can be a little smaller and faster to load: the
message hub's scalar histories (bounded, 1000 values each) are not yet full there.

    python benchmarks/resume.py [--samples 200000] [--batch 32] [--repeats 15]
        [--naive-repeats 2] [--positions 0.01 0.25 0.5 0.9]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from libai.data import DefaultSampler
from libai.hooks import Hook
from libai.registry import DATASETS, HOOKS
from libai.runner import Runner

SEED, FEATURES, CLASSES = 0, 64, 10


@DATASETS.register_module()
class ResumeBenchDataset(Dataset):
    """Items computed on access, like decoding and augmenting a file: a seeded draw, a small
    projection and a normalisation. Nothing is held in memory, so building it is free."""

    def __init__(self, num_samples: int, in_features: int = FEATURES, num_classes: int = CLASSES):
        self.num_samples, self.num_classes = num_samples, num_classes
        g = torch.Generator().manual_seed(SEED)
        self.proj = torch.randn(in_features, in_features, generator=g) / in_features**0.5

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(index)
        x = torch.tanh(self.proj @ torch.randn(self.proj.shape[1], generator=g))  # (F,)
        x = (x - x.mean()) / (x.std() + 1e-6)
        return {"inputs": x, "labels": torch.tensor(index % self.num_classes)}


class _FirstIteration(Exception):
    """Raised by the probe to end a measured run as soon as its first iteration begins."""


# Timestamps of the measured run, written by the probe hook (one run at a time).
_MARKS: dict[str, float] = {}


@HOOKS.register_module()
class ResumeProbeHook(Hook):
    """Records when the run starts, when the checkpoint is loaded and when the first resumed
    iteration begins; then stops the run by raising."""

    priority = "HIGHEST"

    def before_run(self, runner: Any) -> None:
        _MARKS["run"] = time.perf_counter()

    def after_load_checkpoint(self, runner: Any, checkpoint: Any = None) -> None:
        _MARKS["loaded"] = time.perf_counter()

    def before_train_iter(self, runner: Any, batch_idx: int, data_batch: Any = None) -> None:
        _MARKS["first"] = time.perf_counter()
        _MARKS["iter"], _MARKS["batch_idx"] = runner.iter, batch_idx
        raise _FirstIteration


@HOOKS.register_module()
class StopAtHook(Hook):
    """Stop training after any of ``positions`` completed iterations (save_last then saves)."""

    def __init__(self, positions: list[int]) -> None:
        self.positions = set(positions)

    def after_train_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        if runner.iter + 1 in self.positions:
            runner.should_stop = True


def make_cfg(args: argparse.Namespace, work_dir: str, positions: list[int], **extra: Any) -> dict:
    iters_per_epoch = -(-args.samples // args.batch)
    return dict(
        model=dict(type="ToyModel", in_features=FEATURES, num_classes=CLASSES, hidden=32),
        work_dir=work_dir,
        train_dataloader=dict(
            dataset=dict(type="ResumeBenchDataset", num_samples=args.samples),
            sampler=dict(type="DefaultSampler", shuffle=True),
            batch_size=args.batch,
        ),
        train_cfg=dict(
            type="IterBasedTrainLoop", max_iters=2 * iters_per_epoch, val_interval=10**9
        ),
        optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.05, momentum=0.9)),
        default_hooks=dict(
            logger=dict(interval=10**9, progress_bar=False, plot=False),
            checkpoint=dict(interval=-1, save_last=True),
        ),
        custom_hooks=[dict(type="StopAtHook", positions=positions)],
        randomness=dict(seed=SEED),
        log_level="WARNING",
        **extra,
    )


def make_checkpoints(args: argparse.Namespace, work_dir: str, positions: list[int]) -> list[str]:
    """Train a chain of runs, each stopping (and saving) at the next position.

    The files are the ``save_last`` ones written when a run stops, not periodic ones: a periodic
    save happens in ``after_train_iter``, before the loop counts that iteration, and such a file
    resumes one iteration early (``time_resume`` checks the resumed position).
    """
    paths, resume = [], None
    for pos in positions:
        runner = Runner.from_cfg(make_cfg(args, work_dir, positions, resume=resume))
        runner.train()
        if runner.iter != pos:
            sys.exit(f"the chain stopped at iteration {runner.iter}, expected {pos}")
        resume = os.path.join(work_dir, f"iter_{pos}.pth")
        paths.append(resume)
    return paths


def time_resume(
    args: argparse.Namespace, work_dir: str, positions: list[int], path: str, pos: int
) -> tuple[float, float, float]:
    """(build, load, first batch) seconds of one resume, up to the first iteration's start."""
    cfg = make_cfg(args, work_dir, positions, resume=path)
    cfg["custom_hooks"] = cfg["custom_hooks"] + [dict(type="ResumeProbeHook")]
    _MARKS.clear()
    start = time.perf_counter()
    runner = Runner.from_cfg(cfg)
    try:
        runner.train()
    except _FirstIteration:
        pass
    else:
        sys.exit("the resumed run trained to its end without starting an iteration")
    if _MARKS["iter"] != pos or _MARKS["batch_idx"] != pos:
        sys.exit(
            f"resumed at iteration {_MARKS['iter']} (batch {_MARKS['batch_idx']} of the "
            f"epoch), expected {pos}"
        )
    return (
        _MARKS["run"] - start,
        _MARKS["loaded"] - _MARKS["run"],
        _MARKS["first"] - _MARKS["loaded"],
    )


def time_naive(args: argparse.Namespace, batches: int) -> float:
    """Seconds to load ``batches`` batches of the epoch: what re-reading the skipped part costs."""
    dataset = ResumeBenchDataset(args.samples)
    sampler = DefaultSampler(dataset, shuffle=True, seed=SEED)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler)
    start = time.perf_counter()
    for _ in itertools.islice(loader, batches):
        pass
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument(
        "--positions",
        type=float,
        nargs="+",
        default=[0.01, 0.25, 0.5, 0.9],
        help="fractions of the first epoch at which to resume",
    )
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--naive-repeats", type=int, default=2)
    args = parser.parse_args()
    if not 1 <= args.naive_repeats <= args.repeats:
        parser.error("need 1 <= --naive-repeats <= --repeats")
    torch.set_num_threads(1)
    logging.getLogger("libai").setLevel(logging.WARNING)

    iters_per_epoch = -(-args.samples // args.batch)
    positions = sorted(
        {max(1, min(iters_per_epoch - 1, round(f * iters_per_epoch))) for f in args.positions}
    )
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        paths = make_checkpoints(args, os.path.join(tmp, "train"), positions)
        print(
            f"{args.samples} samples, batch {args.batch}: {iters_per_epoch} iterations per epoch; "
            f"checkpoints at {positions} made in {time.perf_counter() - t:.1f} s"
        )
        ours: dict[int, list[tuple[float, float, float]]] = {p: [] for p in positions}
        naive: dict[int, list[float]] = {p: [] for p in positions}
        size_kb = {p: os.path.getsize(path) / 1024 for p, path in zip(positions, paths)}
        for r in range(args.repeats):  # interleaved, so drift in machine load hits every position
            for pos, path in zip(positions, paths):
                ours[pos].append(
                    time_resume(args, os.path.join(tmp, "resume"), positions, path, pos)
                )
                if r < args.naive_repeats:
                    naive[pos].append(time_naive(args, pos))

    total = {p: [sum(parts) for parts in ours[p]] for p in positions}
    first = positions[0]
    print(
        f"{'position':>9}  {'of epoch':>8}  {'ckpt KB':>7}  {'build s':>7}  {'load s':>6}  {'batch s':>7}"
        f"  {'resume s':>8}  {'vs first':>8}  {'naive s':>7}  {'naive/ours':>10}"
    )
    for pos in positions:
        build, load, batch = (statistics.median(x) for x in zip(*ours[pos]))
        vs_first = statistics.median(a / b for a, b in zip(total[pos], total[first]))
        naive_ratio = statistics.median(n / o for n, o in zip(naive[pos], total[pos]))
        print(
            f"{pos:>9}  {pos / iters_per_epoch:>8.1%}  {size_kb[pos]:>7.1f}  {build:>7.3f}  {load:>6.3f}  {batch:>7.3f}"
            f"  {statistics.median(total[pos]):>8.3f}  {vs_first:>8.3f}"
            f"  {statistics.median(naive[pos]):>7.2f}  {naive_ratio:>10.1f}"
        )
    last = positions[-1]
    per_sample = statistics.median(naive[last]) / (last * args.batch)
    print(f"data loading costs {per_sample * 1e6:.1f} us per sample")
    print(
        f"resume time at {last} vs {first} iterations into the epoch: "
        f"{statistics.median(a / b for a, b in zip(total[last], total[first])):.3f} (1.0 = flat)"
    )
    print(
        f"naive resume (re-reading {last} batches) / ours at {last}: "
        f"{statistics.median(n / o for n, o in zip(naive[last], total[last])):.1f}"
    )


if __name__ == "__main__":
    main()
