"""The parity matrix (benchmarks/parity.py) in the suite: every layout the docs table says the
suite runs, through ``tools/train.py`` and ``torchrun`` on the shipped GPT-2 and BERT configs,
against one process; and the table in docs/parallel.md is the script's own.

The 4-process rows run by hand: ``LIBAI_FOUR_PROCESSES=1 python -m pytest
tests/parallel/test_parity.py`` (or ``python benchmarks/parity.py --layouts fsdp+tp hsdp``).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "parity.py"


@pytest.fixture(scope="module")
def parity(load_script):
    return load_script(SCRIPT, "parity")


def run_matrix(tmp_path, *args):
    out = tmp_path / "parity.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--check", "--json", str(out), *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(out.read_text()), run.stdout


def test_docs_table_is_the_scripts(parity):
    text = (ROOT / "docs" / "parallel.md").read_text()
    found = re.search(r"<!-- parity table: .*? -->\n(.*?)\n<!-- end of parity table -->", text, re.S)
    assert found, "docs/parallel.md has lost its parity table markers"
    assert found.group(1) == parity.markdown(), (
        "docs/parallel.md's parity table is stale: paste `python benchmarks/parity.py --markdown`")


def test_a_layout_outside_its_tolerance_fails(parity):
    result = {"loss": 1e-7, "weights": 3e-5, "metrics": 1e-8, "samples": {"val": 5, "test": 6},
              "sizes": {"val": 5, "test": 6}, "effective_batch": (8, 8)}
    lay = parity.LAYOUTS["ddp"]
    assert not parity.passes(result, lay)
    assert parity.passes({**result, "weights": 3e-6}, lay)
    assert not parity.passes({**result, "weights": 3e-6, "samples": {"val": 3, "test": 6}}, lay)
    assert not parity.passes({**result, "weights": 3e-6, "effective_batch": (16, 8)}, lay)
    assert not parity.passes({**result, "weights": float("nan")}, lay)


@pytest.mark.slow
def test_every_suite_layout_equals_one_process(tmp_path, parity):
    results, stdout = run_matrix(tmp_path, "--suite")
    expected = {f"{m}/{name}" for name, lay in parity.LAYOUTS.items() for m in lay.suite}
    assert set(results) == expected, stdout
    for key, result in results.items():  # --check passed; the numbers say why
        assert result["ok"] and result["samples"] == result["sizes"], (key, result)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("LIBAI_FOUR_PROCESSES") != "1",
                    reason="4 processes: by hand, LIBAI_FOUR_PROCESSES=1 (too slow on 2 CI cores)")
def test_four_process_layouts_equal_one_process(tmp_path, parity):
    four = [name for name, lay in parity.LAYOUTS.items() if lay.nproc == 4]
    results, stdout = run_matrix(tmp_path, "--layouts", *four)
    assert all(r["ok"] for r in results.values()), stdout
