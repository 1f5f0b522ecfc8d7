"""benchmarks/compile_time.py --quick runs on the CPU and prints both ways of compiling GPT-2 tiny
(whole model, blocks once per class) with their ratio and the same losses (aot_eager: the figures
themselves are not checked here). The benchmark runs in this process (run_tool); each cold
compile is a process of its own (run_process: the test is slow)."""

import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "compile_time.py"


def test_compile_time_benchmark_quick_prints_both_ways_and_the_same_losses(run_tool, run_process):
    out = run_tool(BENCH, "--quick")
    assert out.returncode == 0, out.stderr[-2000:]
    number = r"([\d.]+(?:e[+-]\d+)?)"
    whole = re.search(rf"^gpt\s+whole\s+0\s+{number}\s+{number}\s+{number}\s+1\.00\s+1\.00\s+"
                      r"\(baseline\)$", out.stdout, re.M)
    regions = re.search(rf"^gpt\s+regions\s+4\s+{number}\s+{number}\s+{number}\s+{number}\s+"
                        rf"{number}\s+{number}$", out.stdout, re.M)
    assert whole and regions, out.stdout
    assert float(regions.group(4)) > 0 and float(regions.group(6)) < 1e-5, out.stdout
