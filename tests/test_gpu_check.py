"""benchmarks/gpu_check.py, the one command for a GPU machine: without CUDA it prints its plan;
with --allow-cpu its harness runs a step on this CPU and writes the one report file."""

from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "benchmarks" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a claim about machines without CUDA")
def test_without_cuda_it_prints_the_plan_and_runs_nothing(run_tool, tmp_path):
    out = run_tool(CHECK, "--report", tmp_path / "r.txt", "--workers", "3")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("No GPU here")
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["gpu", "fast", "figures"]
    assert "-m gpu" in lines[1] and "-m 'not slow and not gpu' -n 3" in lines[2]
    assert "benchmarks/gpu.py --budget" in lines[3]
    assert not (tmp_path / "r.txt").exists()


def test_the_harness_runs_a_step_and_writes_its_report(run_process, tmp_path):
    """The gpu step on this CPU (its tests are skipped here): one summary line, and the step's
    whole pytest output in the report."""
    report = tmp_path / "report.txt"
    out = run_process(CHECK, "--allow-cpu", "--only", "gpu", "--report", report, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = report.read_text()
    assert text.splitlines()[0].startswith("gpu: ") and "FAILED" not in text.splitlines()[0]
    assert "==== gpu: " in text and " -m gpu" in text
