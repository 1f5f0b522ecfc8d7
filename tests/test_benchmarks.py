"""The overhead benchmark still runs, and still finds the Runner's parameters identical to the
hand-written loop's (a short run: the figures themselves are not checked here).

The benchmark runs in this process (run_tool); the interpreters it times are processes of its own
(run_process: the test is slow)."""

import re
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "overhead.py"


@pytest.mark.parametrize("flags", [[], ["--plain-grad-none"]])
def test_overhead_benchmark_runs_and_finds_identical_parameters(run_tool, run_process, flags):
    out = run_tool(BENCH, "--iters", "100", "200", "--repeats", "1", "--chunk", "50",
                   "--pairs", "1", "--import-repeats", "1", "--process-iters", "200",
                   "--process-rounds", 1 if flags else 0, *flags)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = re.findall(r"^\s+(\d+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+(\w+)", out.stdout, re.M)
    assert [(int(n), same) for n, _, same in rows] == [(100, "True"), (200, "True")], out.stdout
    steady = re.search(r"steady state, 1 pairs x 3 interleaved chunks .* ratio ([\d.]+).*"
                       r"identical: True", out.stdout)
    assert steady and float(steady.group(1)) > 0, out.stdout
    assert re.search(r"import libai \+ build a runner: [\d.]+ s more", out.stdout), out.stdout
    if flags:  # one whole-process pair (tools/train.py against the torch-only script)
        whole = re.search(r"whole process, 200 iterations, 1 interleaved pairs: .* = ([\d.]+) .*"
                          r"peak RSS .* MiB = ([+-]\d+) MiB .*identical: True", out.stdout)
        assert whole and float(whole.group(1)) > 0, out.stdout
