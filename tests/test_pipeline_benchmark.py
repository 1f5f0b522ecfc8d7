"""The pipeline benchmark still runs (one process, then a 2-process pipeline, through
tools/train.py) and prints a row that parses: a positive speed-up, the theoretical bubble
(p - 1) / (m + p - 1), and each stage's memory (the figures themselves are not checked here)."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "pipeline.py"
NUM = r"([\d.]+|n/a)"


@pytest.mark.slow  # three runs, one of them on 2 processes (about 40 s on 2 cores)
def test_pipeline_benchmark_runs_and_prints_its_table(tmp_path):
    out = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--schedules", "1f1b", "--microbatches", "4",
         "--json", str(tmp_path / "out.json")],
        capture_output=True, text=True, timeout=600,
    )
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
