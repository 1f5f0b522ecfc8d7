"""Runner overhead against a hand-written PyTorch loop, measured in the same process.

Trains the same tiny model on the same data order and seed twice per size: with the Runner
(default hooks, logging every 50 iterations) and with a plain loop. Checks that the final
parameters are identical, then prints:

* the whole-run time ratio Runner/plain for a short and a long run (``--repeats`` back-to-back
  pairs, which of the two goes first alternating, the median of the per-pair ratios; the ratio
  must stay flat as the run grows);
* the steady-state ratio: a Runner run and a plain loop advanced in alternating chunks of
  ``--chunk`` iterations (a multiple of the log interval, so each chunk holds its log lines),
  the median of the per-chunk ratios over ``--pairs`` such pairs, each built afresh (one pair
  alone moves by +-2% with where its tensors happen to live). Alternating every ~0.1 s puts both
  under the same machine load, so this figure holds still on a noisy machine where whole-run
  pairs scatter by 10-30%; it leaves out the one-off costs (start-up, the final checkpoint),
  which the whole-run figure has, and times the chunks from a log backend, which the logger calls every 50 iterations anyway;
* the import + build cost over ``import torch``.

The plain loop resets gradients with ``opt.zero_grad(set_to_none=True)``, as users write it; the
Runner's OptimWrapper sets ``p.grad = None`` itself, which saves torch's profiler label (~10 us
per step here). ``--plain-grad-none`` gives the plain loop that saving too, so the ratio shows the
Runner's own bookkeeping alone.

    python benchmarks/overhead.py [--iters 1000 4000] [--repeats 7] [--chunk 200] [--pairs 5]
                                  [--import-repeats 5] [--plain-grad-none]
"""

from __future__ import annotations

import argparse
import gc
import logging
import subprocess
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader

from libai.data import DefaultSampler
from libai.hooks import LoggerHook
from libai.hooks.log_backends import BaseLogBackend
from libai.runner import Runner
from libai.testing import ToyDataset, ToyModel

SEED, BATCH, SAMPLES = 0, 16, 512
MODEL = dict(in_features=16, num_classes=4, hidden=32)
DATA = dict(num_samples=SAMPLES, in_features=16, num_classes=4, seed=0)


class PlainStepper:
    """The hand-written PyTorch loop, advanced ``n`` iterations at a time."""

    grad_none = False  # reset gradients with `p.grad = None` instead of opt.zero_grad (a flag)

    def __init__(self) -> None:
        torch.manual_seed(SEED)
        self.model = ToyModel(**MODEL)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.sampler = DefaultSampler(ToyDataset(**DATA), shuffle=True, seed=SEED)
        self.loader = DataLoader(self.sampler.dataset, batch_size=BATCH, sampler=self.sampler)
        self.params = list(self.model.parameters())
        self.model.train()
        self.epoch = 0
        self.sampler.set_epoch(0)
        self.batches = iter(self.loader)

    def run(self, n: int) -> float:
        model, opt = self.model, self.opt
        start = time.perf_counter()
        for _ in range(n):
            try:
                batch = next(self.batches)
            except StopIteration:
                self.epoch += 1
                self.sampler.set_epoch(self.epoch)
                self.batches = iter(self.loader)
                batch = next(self.batches)
            loss = model(batch)["loss"]
            loss.backward()
            opt.step()
            if self.grad_none:
                for p in self.params:
                    p.grad = None
            else:
                opt.zero_grad(set_to_none=True)
        return time.perf_counter() - start


def plain_loop(iters: int) -> tuple[float, dict]:
    loop = PlainStepper()
    gc.collect()  # neither side pays for the other's garbage
    return loop.run(iters), loop.model.state_dict()


class ChunkProbe(BaseLogBackend):
    """A log backend (the logger calls it every 50 iterations, never in between) that, at every
    ``chunk``-th iteration, times the Runner's last chunk and then advances the plain loop by a
    chunk. Being a backend, it adds no per-iteration call to the Runner it times."""

    def __init__(self, chunk: int, plain: PlainStepper) -> None:
        self.chunk, self.plain = chunk, plain
        self.runner_t: list[float] = []
        self.plain_t: list[float] = []
        self.last: float | None = None

    def add_scalars(self, scalars: dict, step: int) -> None:
        if step % self.chunk:
            return
        if self.last is not None:  # from the second boundary on: the chunk since the last
            self.runner_t.append(time.perf_counter() - self.last)
        self.plain_t.append(self.plain.run(self.chunk))
        self.last = time.perf_counter()


def steady_state(iters: int, chunk: int) -> tuple[list[float], bool]:
    """Per-chunk ratios Runner/plain of one interleaved run (the first chunk, which holds both
    warm-ups, left out), and whether the parameters match."""
    plain = PlainStepper()
    probe = ChunkProbe(chunk, plain)
    with tempfile.TemporaryDirectory() as d:
        runner = build_runner(iters, d)
        logger = next(h for h in runner.hooks if isinstance(h, LoggerHook))
        logger.backends.append(probe)
        runner.train_loop  # noqa: B018
        runner.optim_wrapper  # noqa: B018
        gc.collect()
        state = runner.train().state_dict()
    same = all(torch.equal(plain.model.state_dict()[k], state[k]) for k in state)
    return [r / p for r, p in zip(probe.runner_t, probe.plain_t[1:])], same


def build_runner(iters: int, work_dir: str) -> Runner:
    cfg = dict(
        model=dict(type="ToyModel", **MODEL),
        work_dir=work_dir,
        train_dataloader=dict(dataset=dict(type="ToyDataset", **DATA),
                              sampler=dict(type="DefaultSampler", shuffle=True), batch_size=BATCH),
        train_cfg=dict(type="IterBasedTrainLoop", max_iters=iters, val_interval=10**9),
        optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.05, momentum=0.9)),
        default_hooks=dict(logger=dict(interval=50, progress_bar=False, plot=False)),
        randomness=dict(seed=SEED),
        log_level="WARNING",
    )
    return Runner.from_cfg(cfg)


def runner_loop(iters: int, work_dir: str) -> tuple[float, dict]:
    runner = build_runner(iters, work_dir)
    runner.train_loop  # noqa: B018 - build the data loader outside the timed part, like the plain loop
    runner.optim_wrapper  # noqa: B018
    gc.collect()
    start = time.perf_counter()
    model = runner.train()
    return time.perf_counter() - start, model.state_dict()


def import_cost(repeats: int = 5) -> tuple[float, float]:
    """Seconds for ``import torch``, and for ``import libai`` + building a runner after it.

    Each is timed inside a fresh interpreter (best of ``repeats``), so the second figure is
    exactly what libai adds on top of torch.
    """
    code = (
        "import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter()\n"
        "import tempfile, libai\n"
        "from libai.runner import Runner\n"
        "Runner.from_cfg(dict(model=dict(type='ToyModel'), work_dir=tempfile.mkdtemp(),"
        " log_level='WARNING'))\n"
        "print(t1 - t0, time.perf_counter() - t1)\n"
    )
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        runs.append(tuple(map(float, out.stdout.split())))
    return min(r[0] for r in runs), min(r[1] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--chunk", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--import-repeats", type=int, default=5)
    parser.add_argument("--plain-grad-none", action="store_true",
                        help="the plain loop resets gradients with p.grad = None, as the Runner does")
    args = parser.parse_args()
    PlainStepper.grad_none = args.plain_grad_none
    torch.set_num_threads(1)
    logging.getLogger("libai").setLevel(logging.WARNING)
    print(f"{'iters':>6}  {'plain s':>8}  {'runner s':>8}  {'ratio':>6}  identical")
    ratios = []
    for iters in args.iters:
        plain_t, runner_t = [], []
        for i in range(args.repeats):  # interleaved, so drift in machine load hits both
            # and in turns which one goes first, so neither always runs in the other's wake
            for which in ("plain", "runner") if i % 2 == 0 else ("runner", "plain"):
                if which == "plain":
                    t, plain_state = plain_loop(iters)
                    plain_t.append(t)
                else:
                    with tempfile.TemporaryDirectory() as d:
                        t, runner_state = runner_loop(iters, d)
                    runner_t.append(t)
        same = all(torch.equal(plain_state[k], runner_state[k]) for k in plain_state)
        # each repeat runs both back to back: the median of the per-pair ratios cancels the
        # slow drift of a shared machine better than a ratio of separate statistics
        pair_ratios = sorted(r / p for r, p in zip(runner_t, plain_t))
        ratio = pair_ratios[len(pair_ratios) // 2]
        ratios.append(ratio)
        print(f"{iters:>6}  {min(plain_t):>8.3f}  {min(runner_t):>8.3f}"
              f"  {ratio:>6.3f}  {same}   (pairs ranged {pair_ratios[0]:.3f}-{pair_ratios[-1]:.3f})")
        if not same:
            sys.exit("final parameters differ between the Runner and the plain loop")
    print(f"ratio growth from {args.iters[0]} to {args.iters[-1]} iterations: "
          f"{ratios[-1] / ratios[0]:.3f} (1.0 = flat)")
    # a whole number of chunks (at least two), so both sides end after the same iterations
    steady_iters = max(2, args.iters[-1] // args.chunk) * args.chunk
    steady, pair_medians = [], []
    for _ in range(args.pairs):
        ratios, same = steady_state(steady_iters, args.chunk)
        if not same:
            sys.exit("final parameters differ between the Runner and the plain loop")
        steady += ratios
        pair_medians.append(sorted(ratios)[len(ratios) // 2])
    steady.sort()
    print(f"steady state, {args.pairs} pairs x {len(steady) // args.pairs} interleaved chunks of "
          f"{args.chunk} iterations: ratio {steady[len(steady) // 2]:.3f} (median; pairs' medians "
          f"ranged {min(pair_medians):.3f}-{max(pair_medians):.3f})  identical: True")
    torch_s, libai_s = import_cost(args.import_repeats)
    print(f"import torch: {torch_s:.2f} s; then import libai + build a runner: {libai_s:.2f} s "
          f"more (target: at most 0.5 s)")


if __name__ == "__main__":
    main()
