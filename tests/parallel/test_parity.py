"""The parity matrix (benchmarks/parity.py) in the suite: every layout the docs table says the
suite runs, through ``tools/train.py`` and ``torchrun`` on the shipped GPT-2, BERT and Llama
configs, against one process; and the table in docs/parallel.md is the script's own.

Each row is a test of its own (``test_layout_equals_one_process[gpt2/tp]``). The rows of one
model share a module fixture that trains that model's one-process references once, in this
process, and all its rows in one torchrun launch (benchmarks/parity.py, ``run_matrix``); the
scheduler of tests/conftest.py keeps a model's rows on one worker (``GROUPED``), while the models
spread over the workers.

The 4-process rows run by hand: ``LIBAI_FOUR_PROCESSES=1 python -m pytest
tests/parallel/test_parity.py`` (or ``python benchmarks/parity.py --layouts fsdp+tp hsdp``).
"""

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest
import tool_runs

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "parity.py"


def _load():
    spec = importlib.util.spec_from_file_location("parity", SCRIPT)
    module = sys.modules["parity"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registered first: its dataclasses look it up
    return module


PARITY = _load()


@pytest.fixture(scope="module")
def parity():
    return PARITY


def _suite_rows():
    # the id's part before "/" is the group tests/conftest.py keeps on one worker (GROUPED)
    return [pytest.param(m, name, id=f"{m}/{name}")
            for m in PARITY.MODELS for name, lay in PARITY.LAYOUTS.items() if m in lay.suite]


def _train_here(argv):
    run = tool_runs.run_tool("tools/train.py", *argv)
    return run.returncode, run.output


def _launch(nproc, args):
    run = tool_runs.torchrun(nproc, *args, timeout=900)
    return run.returncode, run.output


@pytest.fixture(scope="module")
def matrix(parity, tmp_path_factory):
    """``matrix(model)``: the suite's rows of ``model``, run once per worker and model."""
    results = {}

    def of(model):
        if model not in results:
            plan = parity.Plan(stages=("val",), val_batches=parity.SUITE_VAL_BATCHES)
            layouts = [n for n, lay in parity.LAYOUTS.items() if model in lay.suite]
            results[model] = parity.run_matrix(
                [model], layouts, plan, tmp_path_factory.mktemp(f"parity-{model}"), suite=True,
                train_one=_train_here, launcher=_launch, report=lambda line: None)
        return results[model]

    return of


@pytest.mark.parametrize("model, layout", _suite_rows())
def test_layout_equals_one_process(model, layout, matrix, torchrun, parity):
    result = matrix(model)[f"{model}/{layout}"]
    assert "error" not in result, result.get("error")
    # ok: loss, weights and metrics within the row's tolerance, every sample counted once, the
    # same effective batch; the numbers say why not
    assert result["ok"] and result["samples"] == result["sizes"], result
    if "--graph" in parity.LAYOUTS[layout].flags:  # a sharded model compiles block by block
        assert result["compiled_blocks"] == 2, result


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


def test_the_suite_evaluates_each_path_on_the_whole_set_once(parity):
    # one whole-set row per evaluation path: data shares (ddp), every process all of it (tp),
    # the pipeline's merged microbatches (pp); the other rows evaluate 2 batches
    full = {name for name, lay in parity.LAYOUTS.items() if lay.full_val}
    assert full == {"ddp", "tp", "pp"}
    plan = parity.Plan(stages=("val",), val_batches=2)
    assert parity.expected_samples("gpt2", plan, full=False) == {"val": 16}
    argv = parity.train_argv("bert", Path("w"), plan, (), (), 2, full=False)
    assert "val_dataloader.batch_size=4" in argv and "val_cfg.limit_batches=2" in argv


@pytest.mark.skipif(os.environ.get("LIBAI_FOUR_PROCESSES") != "1",
                    reason="4 processes: by hand, LIBAI_FOUR_PROCESSES=1 (too slow on 2 CI cores)")
def test_four_process_layouts_equal_one_process(tmp_path, parity, torchrun):
    four = [name for name, lay in parity.LAYOUTS.items() if lay.nproc == 4]
    results = parity.run_matrix(list(parity.MODELS), four, parity.Plan(), tmp_path,
                                train_one=_train_here, launcher=_launch)
    assert all(r["ok"] for r in results.values()), results
