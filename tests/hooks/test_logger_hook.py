import json
import logging
import os
import re
import sys

import pytest
import torch

from libai.hooks import IterTimerHook, LoggerHook, RuntimeInfoHook
from libai.registry import HOOKS
from libai.utils.errors import BuildError, ConfigError
from libai.visualization import JsonlBackend, TensorboardBackend
from libai.visualization import backends as vis_backends


def _rows(runner, folder="series_dir"):
    """Training scalars live in the series' run folder; an eval-only run writes into its own."""
    with open(os.path.join(getattr(runner, folder), "scalars.jsonl")) as f:
        return [json.loads(line) for line in f]


def _jsonl_logger(**kw):
    kw.setdefault("backends", [dict(type="JsonlBackend", flush_secs=0)])  # read mid-run
    kw.setdefault("progress_bar", False)
    kw.setdefault("plot", False)
    return LoggerHook(**kw)


def test_iter_lines_average_the_interval(make_runner, run_iters):
    hook = _jsonl_logger(interval=2)
    runner = make_runner(RuntimeInfoHook(), IterTimerHook(), hook, max_iters=5)
    runner.call_hook("before_run")
    run_iters(
        runner,
        outputs=lambda i: {"loss": torch.tensor(float(i + 1)), "loss_cls": torch.tensor(2.0)},
    )
    runner.call_hook("after_run")
    lines = [m for m in runner.messages if m.startswith("Iter")]
    assert [line.split("  ")[0] for line in lines] == ["Iter [2/5]", "Iter [4/5]", "Iter [5/5]"]
    first = lines[0]
    assert "lr: 1.0000e-03" in first
    assert re.search(r"eta: \d+:\d\d:\d\d", first)
    assert re.search(r"time: \d\.\d{4}", first) and re.search(r"data_time: \d\.\d{4}", first)
    assert "loss: 1.5000" in first  # mean of iterations 1 and 2
    assert "loss_cls: 2.0000" in first and "grad_norm: 1.5000" in first
    assert "loss: 5.0000" in lines[2]  # the last iteration alone
    assert runner.message_hub.latest("train/loss") == pytest.approx(5.0)
    assert runner.message_hub.latest("train/lr") == pytest.approx(1e-3)


def test_epoch_line_format(make_runner, run_iters):
    hook = _jsonl_logger(interval=3)
    runner = make_runner(hook, max_iters=8, max_epochs=2, iters_per_epoch=4)
    runner.call_hook("before_run")
    run_iters(runner)
    heads = [m.split("  ")[0] for m in runner.messages if m.startswith("Epoch")]
    # every 3 batches within the epoch, and at its last batch
    assert heads == ["Epoch [1/2][3/4]", "Epoch [1/2][4/4]", "Epoch [2/2][3/4]", "Epoch [2/2][4/4]"]


def test_a_dry_run_counts_to_where_it_stops(make_runner, run_iters):
    """--fast-dev-run stops after 2 iterations: the lines count to 2, in epoch loops too
    (Epoch [1/1][2/2], not [1/2][2/4]) (issue 27)."""
    for kwargs, want in ((dict(max_epochs=2, iters_per_epoch=4), "Epoch [1/1][2/2]"),
                         (dict(), "Iter [2/2]")):
        hook = _jsonl_logger(interval=3)
        runner = make_runner(hook, max_iters=8, **kwargs)
        runner.limit_iters = lambda max_iters, r=runner: min(max_iters, r.iter + 2)
        runner.call_hook("before_run")
        run_iters(runner, n=2)
        heads = [m.split("  ")[0] for m in runner.messages if m.startswith(("Epoch", "Iter"))]
        assert heads == [want]


def test_jsonl_rows_and_val_lines(make_runner, run_iters):
    hook = _jsonl_logger(interval=2)
    runner = make_runner(RuntimeInfoHook(), hook, max_iters=4)
    runner.call_hook("before_run")
    run_iters(
        runner, validate=lambda done: {"val/accuracy": 0.25 * done} if done % 2 == 0 else None
    )
    runner.call_hook("after_run")
    rows = _rows(runner)
    assert [r["step"] for r in rows] == [2, 2, 4, 4]
    assert rows[0]["train/loss"] == pytest.approx((1 + 1 / 2) / 2)
    assert rows[0]["train/lr"] == pytest.approx(1e-3) and rows[0]["train/grad_norm"] == 1.5
    assert rows[1] == {"step": 2, "val/accuracy": 0.5}
    assert rows[3] == {"step": 4, "val/accuracy": 1.0}
    val_lines = [m for m in runner.messages if m.startswith("Iter(val)")]
    assert val_lines[0].startswith("Iter(val) [2/4]  val/accuracy: 0.5000")
    assert runner.message_hub.latest("val/accuracy") == 1.0  # stored by RuntimeInfoHook


def test_log_metric_by_epoch(make_runner, run_iters):
    hook = _jsonl_logger(interval=10, log_metric_by_epoch=True)
    runner = make_runner(hook, max_iters=4, max_epochs=2, iters_per_epoch=2)
    runner.call_hook("before_run")
    run_iters(runner, validate=lambda done: {"val/acc": 1.0})
    runner.call_hook("after_run")
    assert any(m.startswith("Epoch(val) [1/2]") for m in runner.messages)
    val_rows = [r for r in _rows(runner) if "val/acc" in r]
    assert [(r["step"], r["epoch"]) for r in val_rows] == [(2, 1), (4, 2)]


def test_stop_between_intervals_logs_the_rest(make_runner, run_iters):
    hook = _jsonl_logger(interval=10)
    runner = make_runner(hook, max_iters=100)
    runner.call_hook("before_run")
    run_iters(runner, n=3)  # like should_stop after iteration 3
    assert [m.split("  ")[0] for m in runner.messages if m.startswith("Iter")] == ["Iter [3/100]"]
    assert _rows(runner)[-1]["step"] == 3


def test_no_device_read_between_intervals(make_runner, monkeypatch):
    hook = _jsonl_logger(interval=100)
    runner = make_runner(hook, max_iters=1000)
    runner.call_hook("before_run")
    runner.call_hook("before_train")

    def forbidden(*a, **k):
        raise AssertionError("device read on a non-logging iteration")

    with monkeypatch.context() as m:
        for name in ("item", "tolist", "__float__", "cpu"):
            m.setattr(torch.Tensor, name, forbidden)
        for i in range(50):
            runner.iter = i
            hook.after_train_iter(
                runner, i, None, {"loss": torch.tensor(float(i)), "acc": torch.tensor(1.0)}
            )
    runner.iter = 50
    hook.after_train(runner)  # now it reads once
    assert runner.message_hub.latest("train/loss") == pytest.approx(sum(range(50)) / 50)


def test_changing_keys_are_averaged_per_key(make_runner):
    hook = _jsonl_logger(interval=3)
    runner = make_runner(hook, max_iters=3)
    runner.call_hook("before_run")
    runner.call_hook("before_train")
    outs = [
        {"loss": torch.tensor(1.0)},
        {"loss": torch.tensor(3.0), "aux": torch.tensor(4.0)},
        {"loss": torch.tensor(5.0)},
    ]
    for i, out in enumerate(outs):
        runner.iter = i
        hook.after_train_iter(runner, i, None, out)
    assert runner.message_hub.latest("train/loss") == pytest.approx(3.0)
    assert runner.message_hub.latest("train/aux") == pytest.approx(4.0)


def test_tensorboard_events(make_runner, run_iters):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    hook = LoggerHook(interval=2, progress_bar=False, plot=False)  # default backends
    runner = make_runner(hook, max_iters=4)
    runner.call_hook("before_run")
    run_iters(
        runner,
        outputs=lambda i: {"loss": torch.tensor(float(i))},
        validate=lambda done: {"val/accuracy": 0.5} if done == 4 else None,
    )
    runner.call_hook("after_run")
    acc = EventAccumulator(os.path.join(runner.series_dir, "tensorboard"))
    acc.Reload()
    loss = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    assert loss == [(2, pytest.approx(0.5)), (4, pytest.approx(2.5))]
    assert [(e.step, e.value) for e in acc.Scalars("val/accuracy")] == [(4, 0.5)]
    assert "train/lr" in acc.Tags()["scalars"]


def test_tensorboard_missing_warns_once(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto.event_pb2", None)
    monkeypatch.setattr(vis_backends, "_tb_warned", False)
    # a handler of our own: caplog's reaches a non-propagating logger only if pytest attached it
    # there, which depends on what earlier tests did to the logger
    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    vis_backends._logger.addHandler(handler)
    try:
        for _ in range(2):
            backend = TensorboardBackend()
            backend.open(str(tmp_path))
            backend.add_scalars({"a": 1.0}, 1)
            backend.close()
    finally:
        vis_backends._logger.removeHandler(handler)
    warnings = [r.getMessage() for r in records if "TensorBoard logging is off" in r.getMessage()]
    assert len(warnings) == 1 and "pip install tensorboard" in warnings[0]


def test_backends_write_on_flush_checkpoint_and_close(make_runner, run_iters):
    """Rows wait in memory (flush_secs); a checkpoint save and the end of the run write them."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    hook = LoggerHook(interval=2, progress_bar=False, plot=False,
                      backends=[dict(type="JsonlBackend", flush_secs=1000),
                                dict(type="TensorboardBackend", flush_secs=1000)])
    runner = make_runner(hook, max_iters=8)
    runner.call_hook("before_run")
    run_iters(runner, n=4)
    tb_dir = os.path.join(runner.series_dir, "tensorboard")

    def tb_steps():
        acc = EventAccumulator(tb_dir)
        acc.Reload()
        return [e.step for e in acc.Scalars("train/loss")] if "train/loss" in acc.Tags()["scalars"] else []

    assert _rows(runner) == [] and tb_steps() == []  # logged at steps 2 and 4, still kept
    runner.call_hook("before_save_checkpoint", checkpoint={})
    assert [r["step"] for r in _rows(runner)] == [2, 4] and tb_steps() == [2, 4]
    run_iters(runner, n=2)
    assert [r["step"] for r in _rows(runner)] == [2, 4]
    runner.call_hook("after_run")  # also reached by an exception or Ctrl-C: Runner.train's finally
    assert [r["step"] for r in _rows(runner)] == [2, 4, 6] and tb_steps() == [2, 4, 6]


def test_backend_flushes_after_flush_secs(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(vis_backends.time, "monotonic", lambda: clock[0])
    backend = JsonlBackend(flush_secs=5)
    backend.open(str(tmp_path))
    backend.add_scalars({"a": 1.0}, 1)
    clock[0] += 4.9
    backend.add_scalars({"a": 2.0}, 2)
    assert (tmp_path / "scalars.jsonl").read_text() == ""
    clock[0] += 0.1
    backend.add_scalars({"a": 3.0}, 3)  # 5 s since the file was opened: all three go out
    assert [json.loads(line)["step"] for line in (tmp_path / "scalars.jsonl").read_text().splitlines()] == [1, 2, 3]
    backend.close()


def test_jsonl_resume_truncates(tmp_path):
    path = tmp_path / "scalars.jsonl"
    lines = [{"step": 2, "a": 1}, {"step": 4, "a": 2}, {"step": 4, "val/x": 3}, {"step": 6, "a": 4}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"step": 8, "a"')  # cut short
    backend = JsonlBackend()
    backend.open(str(tmp_path), resume_step=4)
    backend.add_scalars({"a": 5.0}, 5)
    backend.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 4, 5]
    assert not (tmp_path / "scalars.jsonl.tmp").exists()
    # a fresh run (no resume step) appends
    backend.open(str(tmp_path))
    backend.add_scalars({"a": 6.0}, 6)
    backend.close()
    assert len(path.read_text().splitlines()) == 5


def test_resumed_hook_truncates_its_jsonl(make_runner, run_iters):
    hook = _jsonl_logger(interval=2)
    runner = make_runner(hook, max_iters=6)
    runner.call_hook("before_run")
    run_iters(runner)
    runner.call_hook("after_run")
    assert [r["step"] for r in _rows(runner)] == [2, 4, 6]
    # resume from a checkpoint at iteration 2 in the same log folder
    hook2 = _jsonl_logger(interval=2)
    runner.hooks = [hook2]
    runner.iter = 2
    runner.call_hook("before_run")
    run_iters(runner)
    runner.call_hook("after_run")
    assert [r["step"] for r in _rows(runner)] == [2, 4, 6]


def test_plots_written(make_runner, run_iters):
    pytest.importorskip("matplotlib")
    hook = LoggerHook(
        interval=1, backends=[dict(type="JsonlBackend")], progress_bar=False, plot="wait"
    )
    runner = make_runner(IterTimerHook(), hook, max_iters=4)
    runner.call_hook("before_run")
    run_iters(runner, validate=lambda done: {"val/accuracy": done / 4, "val/loss": 1.0 / done})
    runner.call_hook("after_run")
    plots = os.path.join(runner.log_dir, "plots")
    for name in ("loss.png", "lr.png", "time.png", "grad_norm.png", "val_accuracy.png"):
        path = os.path.join(plots, name)
        assert os.path.getsize(path) > 1000, name
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert not os.path.exists(os.path.join(plots, "val_loss.png"))  # drawn with the train loss


def test_plots_are_drawn_by_a_background_process_that_logs_when_done(make_runner, run_iters,
                                                                      tmp_path, run_process):
    """plot=True (the default): the run ends at once; the plot process appends to the run's log.
    LoggerHook starts that process itself: run_process (unused) marks the test slow."""
    import logging

    log_file = tmp_path / "run.log"
    handler = logging.FileHandler(log_file)
    hook = LoggerHook(interval=1, backends=[dict(type="JsonlBackend")], progress_bar=False)
    runner = make_runner(IterTimerHook(), hook, max_iters=4)
    runner.logger.addHandler(handler)
    try:
        runner.call_hook("before_run")
        run_iters(runner)
        runner.call_hook("after_run")
    finally:
        runner.logger.removeHandler(handler)
        handler.close()
    assert hook.plot_process is not None and hook.plot_process.wait(timeout=60) == 0
    plots = os.path.join(runner.log_dir, "plots")
    assert os.path.getsize(os.path.join(plots, "overview.png")) > 1000
    assert f"libai - INFO - Saved overview.png and 4 plot(s) in {plots}" in log_file.read_text()


def test_plot_option_is_checked():
    with pytest.raises(ConfigError, match="plot must be True \\(background\\), 'wait' or False"):
        LoggerHook(plot="yes")


def test_test_metrics_logged_outside_training(make_runner, run_val):
    hook = _jsonl_logger()
    runner = make_runner(hook)
    runner.iter = 7
    runner.call_hook("before_run")
    run_val(runner, {"test/accuracy": 0.9}, stage="test")
    runner.call_hook("after_run")
    assert any(m.startswith("Test (iteration 7)  test/accuracy: 0.9000") for m in runner.messages)
    assert _rows(runner, "log_dir") == [{"step": 7, "test/accuracy": 0.9}]
    assert not os.path.exists(os.path.join(runner.work_dir, "scalars.jsonl"))


def test_progress_bar_on_terminal(make_runner, run_iters, monkeypatch):
    import io

    from rich.console import Console

    from libai.utils import logging as libai_logging

    buf = io.StringIO()
    monkeypatch.setattr(
        libai_logging, "_console", Console(file=buf, force_terminal=True, width=100)
    )
    hook = _jsonl_logger(interval=5, progress_bar=True)
    runner = make_runner(hook, max_iters=5)
    runner.call_hook("before_run")
    assert hook._bar.enabled
    runner.call_hook("before_train")
    progress = hook._bar._progress
    task = progress.tasks[0]
    for i in range(3):
        runner.iter = i
        hook.after_train_iter(runner, i, None, {"loss": torch.tensor(1.0)})
    assert task.completed == 3 and task.total == 5
    progress.refresh()
    assert "3/5" in buf.getvalue()
    runner.iter = 3
    runner.call_hook("after_train")
    runner.call_hook("after_run")
    assert hook._bar._progress is None


def test_no_bar_when_not_a_terminal(make_runner):
    hook = _jsonl_logger(progress_bar=True)
    runner = make_runner(hook)
    runner.call_hook("before_run")
    assert not hook._bar.enabled  # pytest captures stdout: not a terminal


def test_options_are_checked():
    with pytest.raises(ConfigError, match="interval"):
        LoggerHook(interval=0)
    with pytest.raises(BuildError):
        HOOKS.build(dict(type="LoggerHook", intervall=3))
    with pytest.raises(Exception, match="JsonBackend"):
        LoggerHook(backends=[dict(type="JsonBackend")])


def test_throughput_figures_read_as_a_person_reads_them():
    """The log line formats ThroughputHook's figures for reading (issue 27): thousands
    separators, 3 significant digits, FLOP/s with its SI prefix and MFU in percent; other keys
    keep `key: value`. The values written to scalars.jsonl are not touched (test_throughput_hook)."""
    from libai.visualization.figures import format_part as _part

    assert _part("samples_per_s", 3322.8005) == "3,323 samples/s"
    assert _part("samples_per_s", 9.5681) == "9.57 samples/s"
    assert _part("tokens_per_s", 1234567.8) == "1,234,568 tokens/s"
    assert _part("tflops", 7.1233) == "7.12 TFLOP/s"
    assert _part("tflops", 7.1233e-04) == "712 MFLOP/s"
    assert _part("mfu", 8.7e-05) == "MFU 0.0087%"
    assert _part("mfu", 0.41237) == "MFU 41.2%"
    assert _part("loss", 0.43211) == "loss: 0.4321"
    assert _part("samples_per_s", float("nan")) == "samples_per_s: nan"


class _Tick:
    """A fake wall clock for the heartbeat (libai.visualization.progress._clock), moved by a
    hook that runs before LoggerHook after every iteration and evaluation batch. CPU only."""

    def __init__(self, monkeypatch, seconds_per_step):
        from libai.hooks import Hook
        from libai.visualization import progress

        self.now, clock = 0.0, self
        monkeypatch.setattr(progress, "_clock", lambda: clock.now, raising=False)

        class TickHook(Hook):
            priority = "HIGHEST"

            def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
                clock.now += seconds_per_step

            after_val_iter = after_test_iter = after_train_iter

        self.hook = TickHook()


def test_heartbeat_lines_where_no_bar_is_drawn(make_runner, run_iters, run_val, monkeypatch):
    """20 s an iteration, a line every 50 iterations: without a bar (not a terminal) a
    heartbeat comes once 30 s have passed since the last line, in training and in validation;
    heartbeat=None turns them off."""
    tick = _Tick(monkeypatch, 20.0)
    hook = _jsonl_logger(interval=50)
    runner = make_runner(tick.hook, hook, max_iters=10)
    runner.call_hook("before_run")
    run_iters(runner)
    lines = runner.messages
    beats = [m for m in lines if "(heartbeat" in m]
    assert [b.split("  ")[0] for b in beats] == [f"Iter [{i}/10]" for i in (2, 4, 6, 8)]
    assert beats[0] == "Iter [2/10]  20 s/it  eta: 0:02:40  (heartbeat; losses every 50 iterations)"
    assert lines[-1].startswith("Iter [10/10]")  # the interval line, no heartbeat beside it
    run_val(runner, {"accuracy": 0.5}, n_batches=4)
    assert [m for m in runner.messages[len(lines):] if "heartbeat" in m] == [
        "Val batch [2/?]  20 s/batch  (heartbeat)", "Val batch [4/?]  20 s/batch  (heartbeat)"]

    quiet = make_runner(_Tick(monkeypatch, 20.0).hook, _jsonl_logger(interval=50, heartbeat=None),
                        max_iters=10)
    quiet.call_hook("before_run")
    run_iters(quiet)
    assert not any("heartbeat" in m for m in quiet.messages)
    with pytest.raises(ConfigError, match="heartbeat must be a number of seconds > 0 or None"):
        LoggerHook(heartbeat=0)
