"""One command for a GPU machine: the CUDA-only checks, the fast tests on CUDA, then the figures.

    python benchmarks/gpu_check.py [--report PATH] [--budget 480] [--workers N] [--only STEP ...]
        [--allow-cpu]

Installs nothing: run it from a checkout whose dependencies are in place (``PYTHONPATH=.`` is
enough where libai is not installed). Steps, in this order, each a subprocess with its share of
``--budget`` seconds (8 minutes in all by default):

- ``gpu``: the tests that carry the ``gpu`` marker (float16 with GradScaler, CUDA RNG state,
  deterministic resume settings, ...), one process;
- ``fast``: the suite's fast tier (``-m "not slow and not gpu"``) on CUDA
  (``LIBAI_TEST_DEVICE=cuda``), in parallel on ``--workers`` processes;
- ``figures``: ``benchmarks/gpu.py`` with what is left of the budget (its correctness passes,
  then BERT-large's figures).

Everything each step prints, failures with their tracebacks (``--tb=long``), goes into one
report file, with a summary at its top and on stdout. Without CUDA it prints the plan and exits
0; ``--allow-cpu`` runs the steps on the CPU anyway (to check this harness). Exit status: 0 when
every step that ran passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("gpu", "fast", "figures")
SHARE = {"gpu": 0.2, "fast": 0.45}  # of the budget; the figures get what is left


def commands(workers: int, figures_budget: float, out: str) -> dict[str, list[str]]:
    pytest = [sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:randomly", "-rfE",
              "--tb=long"]
    return {
        "gpu": pytest + ["-m", "gpu"],
        "fast": pytest + ["-m", "not slow and not gpu", "-n", str(workers),
                          "--maxprocesses", str(workers)],
        "figures": [sys.executable, "benchmarks/gpu.py", "--budget", f"{figures_budget:.0f}",
                    "--out", out],
    }


def run_step(cmd: list[str], timeout: float, env: dict[str, str]) -> tuple[int, str, float]:
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=max(timeout, 1.0))
        status, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        status = 124
        text = (e.stdout or "") + (e.stderr or "") if isinstance(e.stdout, str) else ""
        text += f"\n[gpu_check] stopped after {timeout:.0f} s (its share of --budget)\n"
    return status, text, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--report", default=os.path.join(tempfile.gettempdir(), "libai_gpu_check.txt"),
                        help="the one file with every step's output (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=480, help="seconds for all steps")
    parser.add_argument("--workers", type=int, default=max(1, min(14, (os.cpu_count() or 2) - 2)),
                        help="test processes for the fast step (default: CPUs - 2, at most 14)")
    parser.add_argument("--only", nargs="+", choices=STEPS, metavar="STEP", default=list(STEPS))
    parser.add_argument("--allow-cpu", action="store_true", help="run without CUDA (harness check)")
    args = parser.parse_args(argv)

    import torch

    figures_out = str(Path(args.report).with_suffix(".json"))
    plan = commands(args.workers, args.budget * (1 - sum(SHARE.values())), figures_out)
    if not torch.cuda.is_available() and not args.allow_cpu:
        print("No GPU here: nothing measured. On a GPU machine this runs, in order:")
        for step in args.only:
            print(f"  {step}: {shlex.join(plan[step])}")
        return 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    if torch.cuda.is_available():
        env["LIBAI_TEST_DEVICE"] = "cuda"
    deadline = time.monotonic() + args.budget
    results, sections = [], []
    for i, step in enumerate(args.only):
        left = deadline - time.monotonic()
        last = i == len(args.only) - 1
        share = left if step == "figures" or last else args.budget * SHARE[step]
        if step == "figures":
            plan = commands(args.workers, max(left - 10, 30), figures_out)
        status, text, took = run_step(plan[step], min(share, left), env)
        if status == 5 and step != "figures":  # pytest: no test selected (no gpu test yet)
            status, verdict = 0, "no tests selected"
        else:
            verdict = "passed" if status == 0 else f"FAILED (exit {status})"
        line = f"{step}: {verdict} in {took:.0f} s"
        print(line, flush=True)
        results.append((line, status))
        sections.append(f"==== {step}: {shlex.join(plan[step])}\n{text}")
    summary = "\n".join(line for line, _ in results)
    Path(args.report).write_text(f"{summary}\n\n" + "\n\n".join(sections), encoding="utf-8")
    print(f"report: {args.report}")
    return 0 if all(status == 0 for _, status in results) else 1


if __name__ == "__main__":
    sys.exit(main())
