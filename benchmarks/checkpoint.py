"""How long a checkpoint save blocks training, synchronous against asynchronous, in one process.

Builds a runner whose model has about ``--params-mb`` MB of float32 weights trained with AdamW
(so the checkpoint is about three times that), trains two iterations so that the optimizer state
exists, then alternates, ``--repeats`` times, back to back (which one goes first alternates too):

- sync: ``runner.checkpointer.save(name)``; blocked = until it returns;
- async: ``runner.checkpointer.save(name, asynchronous=True)``; blocked = until it returns. The
  gradients of the next step are computed before the save, so that its optimizer step starts the
  moment the save returns and changes every weight and AdamW moment in place while the file is
  still being written; ``runner.checkpointer.wait()`` ends the total.

Every file is then loaded with ``libai.checkpoint.load_checkpoint`` (which checks it against its
manifest) and compared with ``torch.equal`` to a copy of the weights and optimizer state taken
right before its save: an asynchronous save must hold the state of the moment it was called, not
the one the concurrent step made. Prints the checkpoint size, the median blocked seconds of each
kind, the write throughput, and the median of the per-pair ratios async blocked / sync blocked
(this machine is noisy: only ratios of paired runs are compared).

    python benchmarks/checkpoint.py [--params-mb 64] [--repeats 7]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import torch

from libai.checkpoint import load_checkpoint, read_latest, remove_checkpoint
from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.errors import CheckpointError

IN_FEATURES, CLASSES = 1024, 10


def build_runner(work_dir: str, params_mb: float) -> Runner:
    # ToyModel: Linear(F, H) + Linear(H, C), that is (F + C + 1) * H + C float32 values
    hidden = max(1, round(params_mb * 2**20 / 4 / (IN_FEATURES + CLASSES + 1)))
    data = dict(type="ToyDataset", num_samples=64, in_features=IN_FEATURES, num_classes=CLASSES)
    cfg = toy_config(
        work_dir=work_dir,
        model=dict(type="ToyModel", in_features=IN_FEATURES, num_classes=CLASSES, hidden=hidden),
        train_dataloader=dict(dataset=data),
        train_cfg=dict(max_iters=2, val_interval=10**9),
        val_dataloader=None,
        val_cfg=None,
        val_evaluator=None,
        optim_wrapper=dict(optimizer=dict(type="AdamW", lr=1e-3)),
        default_hooks=dict(
            logger=dict(interval=10**9, progress_bar=False, plot=False),
            checkpoint=dict(interval=-1, save_last=False),
        ),
        log_level="WARNING",
    )
    return Runner.from_cfg(cfg)


def snapshot(obj: Any) -> Any:
    """A deep copy whose tensors share no memory with the originals."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(snapshot(v) for v in obj)
    return obj


def differences(saved: Any, expected: Any, path: str = "") -> list[str]:
    """Key paths where ``saved`` is not exactly ``expected`` (tensors bit for bit)."""
    if isinstance(expected, torch.Tensor):
        ok = (
            isinstance(saved, torch.Tensor)
            and saved.dtype == expected.dtype
            and torch.equal(saved, expected)
        )
        return [] if ok else [path]
    if isinstance(expected, dict):
        if not isinstance(saved, dict) or set(saved) != set(expected):
            return [path]
        return [d for k in expected for d in differences(saved[k], expected[k], f"{path}.{k}")]
    if isinstance(expected, list | tuple):
        if not isinstance(saved, list | tuple) or len(saved) != len(expected):
            return [path]
        return [
            d
            for i, (s, e) in enumerate(zip(saved, expected))
            for d in differences(s, e, f"{path}[{i}]")
        ]
    return [] if saved == expected else [path]


def expected_state(runner: Runner) -> dict:
    return snapshot(
        {
            "state_dict": runner.unwrapped_model.state_dict(),
            "optimizer": runner.optim_wrapper.state_dict(),
        }
    )


def verify(runner: Runner, path: str, expected: dict) -> int:
    """Check the file against ``expected``; return its size in bytes, then delete it."""
    latest = read_latest(runner.work_dir)
    if latest is None or os.path.abspath(latest) != os.path.abspath(path):
        sys.exit(f"the latest pointer names {latest}, not the checkpoint just saved {path}")
    try:
        ckpt = load_checkpoint(path)
    except CheckpointError as e:
        sys.exit(f"the checkpoint just saved does not load: {e}")
    bad = differences({k: ckpt.get(k) for k in expected}, expected)
    if bad:
        sys.exit(f"{path} does not hold the state at the time of its save: {bad[:5]}")
    size = os.path.getsize(path)
    remove_checkpoint(path)
    return size


def backward(runner: Runner, batch: Any) -> None:
    """Gradients of one training step; the optimizer step that uses them comes later."""
    outputs = runner.unwrapped_model(batch)
    outputs["loss"].backward()


def optimizer_step(runner: Runner) -> float:
    """Update every weight and AdamW moment in place; returns the seconds it took."""
    start = time.perf_counter()
    runner.optim_wrapper.step()
    runner.optim_wrapper.zero_grad()
    return time.perf_counter() - start


def time_sync(runner: Runner, name: str, batch: Any) -> tuple[float, int]:
    backward(runner, batch)
    expected = expected_state(runner)
    start = time.perf_counter()
    path = runner.checkpointer.save(name)
    blocked = time.perf_counter() - start
    optimizer_step(runner)  # so that the next save has new values to write
    return blocked, verify(runner, path, expected)


def time_async(runner: Runner, name: str, batch: Any) -> tuple[float, float, float, int]:
    backward(runner, batch)
    expected = expected_state(runner)
    start = time.perf_counter()
    path = runner.checkpointer.save(name, asynchronous=True)
    blocked = time.perf_counter() - start
    step = optimizer_step(runner)  # changes the state while the file is being written
    runner.checkpointer.wait()
    total = time.perf_counter() - start
    changed = differences(expected_state(runner)["state_dict"], expected["state_dict"])
    if len(changed) != len(expected["state_dict"]):
        sys.exit("the optimizer step during the asynchronous save left some weights unchanged")
    return blocked, total, step, verify(runner, path, expected)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--params-mb",
        type=float,
        default=64.0,
        help="float32 weights of the model, in MB (AdamW adds twice that)",
    )
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    logging.getLogger("libai").setLevel(logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        runner = build_runner(tmp, args.params_mb)
        runner.train()  # two iterations: AdamW's moments exist from here on
        batch = next(iter(runner.train_dataloader))
        n_params = sum(p.numel() for p in runner.unwrapped_model.parameters())
        sync_t, async_t, total_t, step_t, sizes = [], [], [], [], []
        for r in range(args.repeats):
            # alternate which goes first, so that neither always follows the other's write
            for kind in ("sync", "async") if r % 2 == 0 else ("async", "sync"):
                if kind == "sync":
                    blocked, size = time_sync(runner, f"sync_{r}.pth", batch)
                    sync_t.append(blocked)
                else:
                    blocked, total, step, size = time_async(runner, f"async_{r}.pth", batch)
                    async_t.append(blocked)
                    total_t.append(total)
                    step_t.append(step)
                sizes.append(size)

    mb = statistics.median(sizes) / 2**20
    sync_s, async_s, total_s = (statistics.median(x) for x in (sync_t, async_t, total_t))
    print(
        f"model: {n_params / 1e6:.1f} M float32 parameters ({n_params * 4 / 2**20:.1f} MB) + "
        f"AdamW state; checkpoint {mb:.1f} MB; {args.repeats} pairs; "
        f"{2 * args.repeats} files verified equal to the state at their save"
    )
    print(f"{'':>22}  {'median s':>8}  {'min s':>6}  {'MB/s':>6}")
    print(f"{'sync blocked':>22}  {sync_s:>8.3f}  {min(sync_t):>6.3f}  {mb / sync_s:>6.0f}")
    print(f"{'async blocked':>22}  {async_s:>8.3f}  {min(async_t):>6.3f}  {'':>6}")
    print(f"{'async total':>22}  {total_s:>8.3f}  {min(total_t):>6.3f}  {mb / total_s:>6.0f}")
    print(
        f"(async total includes one AdamW step of {statistics.median(step_t):.3f} s that ran "
        f"while the file was written)"
    )
    print(
        f"async total / sync blocked: "
        f"{statistics.median(t / s for t, s in zip(total_t, sync_t)):.3f}"
    )
    print(
        f"async blocked / sync blocked: "
        f"{statistics.median(a / s for a, s in zip(async_t, sync_t)):.3f}"
    )


if __name__ == "__main__":
    main()
