"""The pipeline benchmark still runs (one process, then a 2-process pipeline, through
tools/train.py) and prints a row that parses: a positive speed-up, the theoretical bubble
(p - 1) / (m + p - 1), and each stage's memory (the figures themselves are not checked here)."""

import json
import re
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "pipeline.py"
NUM = r"([\d.]+|n/a)"


def test_pipeline_benchmark_runs_and_prints_its_table(run_tool, torchrun, tmp_path):
    # the benchmark in this process; its three runs are processes of its own, one a torchrun
    # launch (the torchrun fixture: the test is slow)
    out = run_tool(BENCH, "--quick", "--schedules", "1f1b", "--microbatches", "4", "--json",
                   tmp_path / "out.json")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(rf"^(\w+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(-?[\d.]+)\s+([\d.]+)"
                      rf"\s+{NUM}\s+{NUM}\s+{NUM}\s+{NUM}\s*$", out.stdout, re.M)
    assert len(rows) == 1, out.stdout
    schedule, m, step, speedup, measured, theory, *memory = rows[0]
    p, m = 2, int(m)
    assert (schedule, m) == ("1f1b", 4)
    assert float(step) > 0 and float(speedup) > 0, out.stdout
    assert float(measured) < 1
    assert float(theory) == pytest.approx((p - 1) / (m + p - 1), abs=0.005)
    state = [float(v) for v in memory[:2]]  # parameters + gradients + optimizer state: exact
    assert all(0 < s < 1 for s in state), out.stdout  # each stage holds part of the model

    result = json.loads((tmp_path / "out.json").read_text())["rows"][0]
    assert result["theory"] == pytest.approx((p - 1) / (m + p - 1))
    assert sorted(r["stages"] for r in result["memory"]) == [[0], [1]]
