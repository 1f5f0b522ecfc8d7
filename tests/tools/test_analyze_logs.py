"""tools/analyze_logs.py: curves, iteration times and summaries of runs; bad input in one line."""

import json
import sys
from pathlib import Path

import pytest

from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "analyze_logs.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def tool(load_script):
    yield load_script(TOOL, "analyze_logs_tool")
    sys.modules.pop("analyze_logs_tool", None)


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _log(folder, *lines):
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(f"2024-01-01 00:00:00,000 - libai - INFO - {line}\n" for line in lines)
    (folder / f"{folder.name}.log").write_text(text)


DERIVED = "Derived: iterations per epoch 10, max iterations 40, effective batch size 8"


@pytest.fixture
def hand(tmp_path):
    """Two work dirs written by hand, with exact values.

    a: train rows every 10 iterations; validation at 20 and 40; run folders: a stale one (a
    training that a later fresh run overwrote), the current fresh training, its resume, and a
    test-only run at the same step as the resume's test (the newer wins).
    b: uneven log intervals, no run folders (no log: no iterations per epoch).
    """
    a = tmp_path / "runs" / "a"
    _write(a / "scalars.jsonl", [
        {"step": 10, "train/loss": 1.0, "train/time": 0.1, "train/data_time": 0.05},
        {"step": 20, "train/loss": 0.8, "train/time": 0.2, "train/data_time": 0.05},
        {"step": 20, "val/accuracy": 0.8, "val/loss": 0.9},
        {"step": 30, "train/loss": 0.6, "train/time": 0.4, "train/data_time": 0.1},
        {"step": 40, "train/loss": 0.7, "train/time": 0.3, "train/data_time": 0.15},
        {"step": 40, "val/accuracy": 0.7, "val/loss": 0.6},
    ])
    _log(a / "20240101_000000", DERIVED)
    _write(a / "20240101_000000" / "scalars.jsonl", [{"step": 100, "test/accuracy": 0.1}])
    _log(a / "20240102_000000", DERIVED)
    _write(a / "20240102_000000" / "scalars.jsonl", [{"step": 20, "test/accuracy": 0.6}])
    _log(a / "20240103_000000", "Resumed from iter_20.pth at iteration 20", DERIVED)
    _write(a / "20240103_000000" / "scalars.jsonl",
           [{"step": 40, "test/accuracy": 0.72, "test/loss": 0.5}])
    _log(a / "20240104_000000", "Environment:")  # tools/test.py: no training
    _write(a / "20240104_000000" / "scalars.jsonl", [{"step": 40, "test/accuracy": 0.74}])
    b = tmp_path / "runs" / "b"
    _write(b / "scalars.jsonl", [
        {"step": 5, "train/loss": 2.0, "train/time": 0.2, "train/data_time": 0.1},
        {"step": 20, "train/loss": 1.5, "train/time": 0.1, "train/data_time": 0.02},
        {"step": 20, "val/accuracy": 0.5, "val/perplexity": 12.0, "val/foo": 3.0},
    ])
    with open(b / "scalars.jsonl", "a") as f:
        f.write('{"step": 20, "val/accura')  # a line cut short by a killed process: skipped
    return a, b


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Two tiny trainings with the Runner (20 iterations, log every 5, validation every 10),
    each followed by a test, as tools/train.py does."""
    dirs = []
    for name, lr in (("lr0.1", 0.1), ("lr0.01", 0.01)):
        work = tmp_path_factory.mktemp("real") / name
        runner = Runner.from_cfg(toy_config(
            work_dir=str(work),
            default_hooks=dict(logger=dict(interval=5, progress_bar=False, plot=False),
                               checkpoint=None),
            optim_wrapper=dict(optimizer=dict(type="SGD", lr=lr)),
            test_dataloader=toy_config()["val_dataloader"], test_evaluator=dict(type="Accuracy"),
            test_cfg=dict(type="TestLoop"), log_level="WARNING"))
        runner.train()
        runner.test()
        dirs.append(work)
    return dirs


def training_scalars(work_dir):
    from libai.utils.run_layout import training_scalars as find

    return find(work_dir)


def _one_error_line(capsys, tool, argv):
    with pytest.raises(SystemExit) as exc:
        run_cli(tool.main, argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ------------------------------------------------------------------------------- real runs
def test_plot_curve_of_two_trainings(tool, real, tmp_path):
    out = tmp_path / "plots" / "curves.png"  # the folder is created
    fig = tool.plot_curve(real, keys=["train/loss", "val/accuracy"], out=out)
    assert out.read_bytes()[:8] == PNG_MAGIC
    axes = fig.get_axes()
    assert [ax.get_title() for ax in axes] == ["train/loss", "val/accuracy"]
    for ax in axes:
        assert len(ax.get_lines()) == 2
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["lr0.1", "lr0.01"]
    steps = [json.loads(line)["step"] for line in open(training_scalars(str(real[0])))
             if "train/loss" in line]
    assert list(axes[0].get_lines()[0].get_xdata()) == steps == [5, 10, 15, 20]


def test_times_and_summary_of_trainings(tool, real):
    times = tool.cal_train_time(real)
    assert list(times) == ["lr0.1", "lr0.01"]
    for t in times.values():
        assert t.iterations == 20 and 0 < t.fastest <= t.mean <= t.slowest
        assert 0 < t.data_time_share < 1 and t.total == pytest.approx(t.mean * 20)
    s = tool.summary(real)["lr0.1"]
    rows = [json.loads(line) for line in open(training_scalars(str(real[0])))]
    acc = [r["val/accuracy"] for r in rows if "val/accuracy" in r]
    assert s.metrics["val/accuracy"].last == acc[-1] and s.metrics["val/accuracy"].best == max(acc)
    assert s.metrics["test/accuracy"].last_step == 20  # from the run folder of the test
    assert s.iterations == 20 and set(s.metrics) == {
        "train/loss", "val/accuracy", "val/loss", "test/accuracy", "test/loss"}


# ------------------------------------------------------------------------------- exact values
def test_work_dir_merges_current_run_folders(tool, hand):
    a, _ = hand
    (run,) = tool.load_runs([a])
    assert run.name == "a" and run.iters_per_epoch == 10
    # the stale folder (step 100) is left out; at step 40 the test-only run (newer) wins
    assert run.series["test/accuracy"] == ([20, 40], [0.6, 0.74])
    assert run.series["test/loss"] == ([40], [0.5])
    assert len(run.files) == 4 and any("older than the current training" in n for n in run.notes)
    (file_run,) = tool.load_runs([a / "scalars.jsonl"])  # the file alone: no test scalars
    assert not any(k.startswith("test/") for k in file_run.series)


def test_cal_train_time_matches_hand_computed(tool, hand):
    times = tool.cal_train_time(hand)
    a, b = times["a"], times["b"]
    # a: four rows of 10 iterations each
    assert a.iterations == 40 and a.total == pytest.approx((0.1 + 0.2 + 0.4 + 0.3) * 10)
    assert a.mean == pytest.approx(0.25)
    assert (a.slowest, a.slowest_step, a.fastest, a.fastest_step) == (0.4, 30, 0.1, 10)
    assert a.data_time_share == pytest.approx((0.05 + 0.05 + 0.1 + 0.15) / 1.0)
    # b: rows covering 5 and 15 iterations
    assert b.iterations == 20 and b.total == pytest.approx(0.2 * 5 + 0.1 * 15)
    assert b.mean == pytest.approx(2.5 / 20)
    assert b.data_time_share == pytest.approx((0.1 * 5 + 0.02 * 15) / 2.5)
    assert (b.slowest_step, b.fastest_step) == (5, 20)


def test_summary_best_and_last(tool, hand):
    s = tool.summary(hand)
    a, b = s["a"].metrics, s["b"].metrics
    acc = a["val/accuracy"]
    assert (acc.rule, acc.best, acc.best_step, acc.last, acc.last_step) == ("max", 0.8, 20, 0.7, 40)
    loss = a["val/loss"]
    assert (loss.rule, loss.best, loss.best_step, loss.last) == ("min", 0.6, 40, 0.6)
    train = a["train/loss"]
    assert (train.best, train.best_step, train.last, train.last_step) == (0.6, 30, 0.7, 40)
    assert (a["test/accuracy"].best, a["test/accuracy"].last) == (0.74, 0.74)
    assert "train/time" not in a
    assert s["a"].iterations == 40 and s["a"].train_time == pytest.approx(10.0)
    assert (b["val/perplexity"].rule, b["val/perplexity"].best) == ("min", 12.0)
    assert (b["val/foo"].rule, b["val/foo"].best, b["val/foo"].last) == (None, None, 3.0)


def test_rule_agrees_with_checkpoint_hook(tool):
    from libai.hooks._metrics import infer_rule

    for key in ("val/accuracy", "val/loss", "val/top1_error", "val/perplexity", "test/mlm_acc",
                "val/f1", "val/bleu", "val/mAP", "val/wer", "val/nll", "val/psnr"):
        assert tool.better_rule(key) == {"greater": "max", "less": "min"}[infer_rule(key, "")]
    assert tool.better_rule("val/foo") is None


def test_epoch_axis_smoothing_legend_and_svg(tool, hand, tmp_path):
    a, b = hand
    fig = tool.plot_curve([a], x="epoch", smooth=2, legend=["mine"], title="T", log_scale=True)
    (ax,) = fig.get_axes()
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1.0, 2.0, 3.0, 4.0]
    assert list(line.get_ydata()) == pytest.approx([1.0, 0.9, 0.7, 0.65])  # window of 2
    assert ax.get_legend().get_texts()[0].get_text() == "mine"
    assert ax.get_xlabel() == "epoch" and ax.get_yscale() == "log" and fig.get_suptitle() == "T"
    svg = tmp_path / "c.svg"
    tool.plot_curve([a, b], keys=["train/loss", "val/accuracy"], out=svg)
    text = svg.read_text()
    assert text.startswith("<?xml") and "<svg" in text
    assert text.count('id="curve_') == 4  # 2 keys x 2 runs
    pdf = tmp_path / "c.pdf"
    tool.plot_curve([b], out=pdf)
    assert pdf.read_bytes()[:5] == b"%PDF-"


def test_command_line_outputs(tool, hand, tmp_path, capsys):
    a, b = hand
    out = tmp_path / "c.png"
    assert tool.main(["plot_curve", str(a), str(b), "--keys", "train/loss", "val/accuracy",
                      "--legend", "A", "B", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert tool.main(["summary", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "0.8 @20" in text and "0.7 @40" in text and "best (max)" in text and "12 @20" in text
    assert tool.main(["cal_train_time", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "0.2500" in text and "0.4000 @30" in text and "35.0%" in text and "32.0%" in text


# ------------------------------------------------------------------------------- bad input
def test_bad_input_is_one_line(tool, hand, tmp_path, capsys):
    a, b = hand
    line = _one_error_line(capsys, tool, ["summary", str(tmp_path / "nope")])
    assert "no such file or directory" in line
    (tmp_path / "empty").mkdir()
    line = _one_error_line(capsys, tool, ["cal_train_time", str(tmp_path / "empty")])
    assert "no scalars.jsonl" in line
    line = _one_error_line(capsys, tool, ["summary", str(tmp_path / "runs")])
    assert "It holds the work dirs a, b" in line
    line = _one_error_line(capsys, tool, ["plot_curve", str(b), "--keys", "val/acc",
                                          "--out", str(tmp_path / "x.png")])
    assert "has no key 'val/acc'. Did you mean 'val/accuracy'" in line and "train/loss" in line
    line = _one_error_line(capsys, tool, ["plot_curve", str(b), "--x", "epoch",
                                          "--out", str(tmp_path / "x.png")])
    assert "iterations per epoch unknown" in line
    line = _one_error_line(capsys, tool, ["plot_curve", str(b), "--out", str(tmp_path / "x.jpg")])
    assert ".png, .svg, .pdf" in line
    line = _one_error_line(capsys, tool, ["plot_curve", str(b), "--legend", "x", "y",
                                          "--out", str(tmp_path / "x.png")])
    assert "2 legend name(s) for 1 run(s)" in line
    line = _one_error_line(capsys, tool, ["cal_train_time", str(b / "20240101_000000")])
    assert "no such file" in line
    assert not (tmp_path / "x.png").exists()


def test_a_scalars_file_that_is_not_utf8(tool, tmp_path, capsys):
    """Not text at all (UTF-16): one line; one damaged line among good ones: skipped, noted."""
    (tmp_path / "u16").mkdir()
    (tmp_path / "u16" / "scalars.jsonl").write_bytes('{"step": 1, "train/loss": 1.0}\n'.encode("utf-16"))
    line = _one_error_line(capsys, tool, ["summary", str(tmp_path / "u16" / "scalars.jsonl")])
    assert line == (f"error: {tmp_path / 'u16' / 'scalars.jsonl'} is not UTF-8 text (line 1 has "
                    f"the byte 0xff): a scalars.jsonl is JSON lines in UTF-8, as libai writes it. "
                    f"Is this the right file?")
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "scalars.jsonl").write_bytes(
        b'{"step": 1, "train/loss": 1.0}\n\xff\xfe garbage\n{"step": 2, "train/loss": 0.5}\n')
    with pytest.raises(SystemExit) as exc:
        run_cli(tool.main, ["summary", str(tmp_path / "mixed")])
    out = capsys.readouterr()
    assert exc.value.code == 0 and "skipped 1 unreadable line(s)" in out.err


def test_script_error_is_one_line(run_process, tmp_path):
    # the script's own process (its one in the suite): exit status 2, one line, no traceback
    out = run_process(TOOL, "summary", tmp_path / "nope")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'nope'}: no such file or directory (a RUN is a work dir or a "
        f"scalars.jsonl)"]
