"""overview.png: loss, lr, validation metrics and iteration time on one page, beside the PNGs per
scalar family."""

import json
import os

import pytest

from libai.hooks import IterTimerHook, LoggerHook
from libai.visualization import plots as plots_module
from libai.visualization.plots import OVERVIEW, overview_figure, overview_panels, plot_scalars

pytest.importorskip("matplotlib")

STEPS = [1, 2, 3, 4]


def _series(*tags):
    return {tag: (list(STEPS), [1.0 / s for s in STEPS]) for tag in tags}


def _titles_and_lines(fig):
    return [(ax.get_title(), [line.get_label() for line in ax.lines]) for ax in fig.axes]


def test_every_kind_present_gets_a_subplot_with_data():
    series = _series("train/loss", "val/loss", "train/lr", "val/accuracy", "val/perplexity",
                     "train/time", "train/data_time", "train/grad_norm", "test/accuracy")
    fig = overview_figure(series)
    assert _titles_and_lines(fig) == [
        ("loss", ["train/loss", "val/loss"]),
        ("lr", ["train/lr"]),
        ("val/accuracy", ["val/accuracy"]),
        ("val/perplexity", ["val/perplexity"]),
        ("iteration time (s)", ["train/data_time", "train/time"]),
    ]  # grad_norm and test scalars have their own PNGs only
    for ax in fig.axes:
        assert ax.has_data()
        assert all(list(line.get_xdata()) == STEPS for line in ax.lines)
    # five panels on a 3 x 2 grid: no empty sixth axes
    assert len(fig.axes) == 5
    assert fig.axes[0].get_subplotspec().get_geometry()[:2] == (2, 3)


@pytest.mark.parametrize("tags, titles", [
    (("train/loss",), ["loss"]),
    (("train/loss", "train/lr", "train/time"), ["loss", "lr", "iteration time (s)"]),
    (("train/loss", "train/mlm_loss", "val/mlm_accuracy"), ["loss", "val/mlm_accuracy"]),
    (("train/lr_group1", "train/lr", "val/digits/accuracy"), ["lr", "val/digits/accuracy"]),
])
def test_axes_match_the_keys_present(tags, titles):
    series = _series(*tags)
    assert [title for title, _ in overview_panels(series)] == titles
    fig = overview_figure(series)
    assert [ax.get_title() for ax in fig.axes] == titles
    assert all(ax.has_data() for ax in fig.axes)


def test_nothing_to_show_is_no_figure():
    assert overview_figure(_series("test/accuracy", "test/loss")) is None
    assert overview_figure(_series("train/grad_norm")) is None
    assert overview_figure({}) is None


def _write_jsonl(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def test_plot_scalars_writes_the_overview_first(tmp_path):
    jsonl = tmp_path / "scalars.jsonl"
    _write_jsonl(jsonl, [{"step": s, "train/loss": 1.0 / s, "train/lr": 0.1, "train/overview": 2.0}
                         for s in STEPS] + [{"step": 4, "val/accuracy": 0.9}])
    paths = plot_scalars(str(jsonl), str(tmp_path / "plots"))
    names = [os.path.basename(p) for p in paths]
    assert names == [OVERVIEW, "loss.png", "lr.png", "overview_scalar.png", "val_accuracy.png"]
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_no_overview_for_test_scalars_only(tmp_path):
    jsonl = tmp_path / "scalars.jsonl"
    _write_jsonl(jsonl, [{"step": 10, "test/accuracy": 0.9}])
    paths = plot_scalars(str(jsonl), str(tmp_path / "plots"))
    assert [os.path.basename(p) for p in paths] == ["test_accuracy.png"]


def test_logger_hook_saves_and_names_the_overview_first(make_runner, run_iters):
    hook = LoggerHook(interval=1, backends=[dict(type="JsonlBackend")], progress_bar=False,
                      plot="wait")
    runner = make_runner(IterTimerHook(), hook, max_iters=4)
    runner.call_hook("before_run")
    run_iters(runner, validate=lambda done: {"val/accuracy": done / 4, "val/loss": 1.0 / done})
    runner.call_hook("after_run")
    plots = os.path.join(runner.log_dir, "plots")
    assert os.path.getsize(os.path.join(plots, OVERVIEW)) > 1000
    # loss, lr, time, grad_norm, val_accuracy
    assert f"Saved {OVERVIEW} and 5 plot(s) in {plots}" in runner.messages


def test_the_plot_script_imports_neither_torch_nor_libai(tmp_path, run_process):
    """LoggerHook runs plots.py as a file in a background process, which must import the
    standard library and matplotlib only (no torch, no libai): a fresh interpreter shows it."""
    jsonl = tmp_path / "scalars.jsonl"
    _write_jsonl(jsonl, [{"step": s, "train/loss": 1.0 / s} for s in STEPS])
    log = tmp_path / "run.log"
    out = run_process("-X", "importtime", plots_module.__file__, jsonl, tmp_path / "plots", log,
                      timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()
                if line.startswith("import time:")}
    assert "matplotlib" in imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "libai")}
    assert f"Saved {OVERVIEW} and 1 plot(s) in {tmp_path / 'plots'}" in log.read_text()
