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
* the import + build cost over ``import torch``;
* the whole process, what ``time`` shows: ``python tools/train.py CONFIG`` (default hooks: log
  lines, scalars.jsonl, TensorBoard, plots, final checkpoint) against a hand-written script that
  imports only torch and trains the same model on the same data in the same order, printing
  the loss every 50 iterations and saving the final model and optimizer (``--process-iters``
  iterations, ``--process-rounds`` interleaved pairs): the median per-pair wall-time ratio and
  the difference in peak resident memory (``ru_maxrss`` of each child); the final parameters
  must be identical.

The plain loop resets gradients with ``opt.zero_grad(set_to_none=True)``, as users write it; the
Runner's OptimWrapper sets ``p.grad = None`` itself, which saves torch's profiler label (~10 us
per step here). ``--plain-grad-none`` gives the plain loop that saving too, so the ratio shows the
Runner's own bookkeeping alone.

    python benchmarks/overhead.py [--iters 1000 4000] [--repeats 7] [--chunk 200] [--pairs 5]
                                  [--import-repeats 5] [--plain-grad-none]
                                  [--process-iters 3000] [--process-rounds 7]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader

from libai.data import DefaultSampler
from libai.hooks import LoggerHook
from libai.runner import Runner
from libai.testing import ToyDataset, ToyModel
from libai.utils.run_layout import wait_for_plots
from libai.visualization.backends import BaseLogBackend

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


# The hand-written script of the whole-process comparison: torch only, the same data (ToyDataset's
# blobs), the same order (DefaultSampler's per-epoch permutation), the same model and updates.
PLAIN_SCRIPT = """
import sys
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

N, FEATURES, CLASSES, HIDDEN, BATCH, SEED = 512, 16, 4, 32, 16, 0
iters, out = int(sys.argv[1]), sys.argv[2]


class Blobs(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(SEED)
        centres = torch.randn(CLASSES, FEATURES, generator=g) * 2.0
        self.labels = torch.arange(N) % CLASSES
        self.inputs = centres[self.labels] + torch.randn(N, FEATURES, generator=g)

    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"inputs": self.inputs[i].clone(), "labels": self.labels[i].clone()}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))

    def forward(self, batch):
        logits = self.net(batch["inputs"])
        acc = (logits.detach().argmax(dim=1) == batch["labels"]).float().mean()
        return {"loss": F.cross_entropy(logits, batch["labels"]), "acc": acc}


torch.manual_seed(SEED)
data = Blobs()
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
it, epoch = 0, 0
while it < iters:
    order = torch.randperm(N, generator=torch.Generator().manual_seed(SEED + epoch)).tolist()
    for batch in DataLoader(data, batch_size=BATCH, sampler=order):
        loss = model(batch)["loss"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        it += 1
        if it % 50 == 0:
            print(f"iter {it} loss {loss.item():.4f}")
        if it == iters:
            break
    epoch += 1
torch.save({"state_dict": model.state_dict(), "optimizer": opt.state_dict()}, out)
"""

TRAIN_CONFIG = """
model = dict(type="ToyModel", in_features=16, num_classes=4, hidden=32)
train_dataloader = dict(
    dataset=dict(type="ToyDataset", num_samples=512, in_features=16, num_classes=4, seed=0),
    sampler=dict(type="DefaultSampler", shuffle=True), batch_size=16)
train_cfg = dict(type="IterBasedTrainLoop", max_iters={iters})
optim_wrapper = dict(optimizer=dict(type="SGD", lr=0.05, momentum=0.9))
randomness = dict(seed=0)
"""


def whole_process(iters: int, rounds: int) -> tuple[list[float], list[float], list[float], list[float], bool]:
    """``rounds`` interleaved pairs of fresh processes: the plain script and tools/train.py."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    plain_t, libai_t, plain_m, libai_m = [], [], [], []
    with tempfile.TemporaryDirectory() as d:
        script, config = os.path.join(d, "plain.py"), os.path.join(d, "toy_mlp.py")
        with open(script, "w") as f:
            f.write(PLAIN_SCRIPT)
        with open(config, "w") as f:
            f.write(TRAIN_CONFIG.format(iters=iters))
        for i in range(rounds):
            work = os.path.join(d, f"work{i}")
            cmds = {"plain": [sys.executable, script, str(iters), os.path.join(d, "plain.pth")],
                    "libai": [sys.executable, os.path.join(root, "tools", "train.py"), config,
                              "--work-dir", work]}
            for which in ("plain", "libai") if i % 2 == 0 else ("libai", "plain"):
                seconds, mib = _run_child(cmds[which])
                (plain_t if which == "plain" else libai_t).append(seconds)
                (plain_m if which == "plain" else libai_m).append(mib)
        for i in range(rounds):  # the plots, drawn after each run exits, before d is removed
            wait_for_plots(os.path.join(d, f"work{i}"))
        plain_state = torch.load(os.path.join(d, "plain.pth"))["state_dict"]
        libai_state = torch.load(os.path.join(work, f"iter_{iters}.pth"))["state_dict"]
        same = all(torch.equal(plain_state[k], libai_state[k]) for k in plain_state)
    return plain_t, libai_t, plain_m, libai_m, same


def _run_child(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MiB (``ru_maxrss``) of one child process."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=dict(os.environ, OMP_NUM_THREADS="1"))
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if status:
        sys.exit(f"{' '.join(cmd)} failed:\n{stderr.decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, nargs="+", default=[1000, 4000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--chunk", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--import-repeats", type=int, default=5)
    parser.add_argument("--process-iters", type=int, default=3000)
    parser.add_argument("--process-rounds", type=int, default=7)
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
    if args.process_rounds:
        plain_t, libai_t, plain_m, libai_m, same = whole_process(args.process_iters, args.process_rounds)
        pair = sorted(r / p for r, p in zip(libai_t, plain_t))
        ratio, delta = statistics.median(pair), statistics.median(libai_m) - statistics.median(plain_m)
        print(f"whole process, {args.process_iters} iterations, {args.process_rounds} interleaved pairs: "
              f"tools/train.py {statistics.median(libai_t):.2f} s / plain script "
              f"{statistics.median(plain_t):.2f} s = {ratio:.3f} (median of pairs, ranged "
              f"{pair[0]:.3f}-{pair[-1]:.3f}; target <= 1.10: {'met' if ratio <= 1.10 else 'NOT met'}); "
              f"peak RSS {statistics.median(libai_m):.0f} MiB vs {statistics.median(plain_m):.0f} MiB = "
              f"{delta:+.0f} MiB (target <= +20: {'met' if delta <= 20 else 'NOT met'})  identical: {same}")
        if not same:
            sys.exit("final parameters differ between tools/train.py and the plain script")


if __name__ == "__main__":
    main()
