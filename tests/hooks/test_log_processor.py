"""LogProcessor words LoggerHook's lines, apart from the hook that decides when (issue 36 item 4):
the lines of the docs (hooks.md) from plain values, no runner, no hook. CPU."""

import re
from types import SimpleNamespace

from libai.hooks.log_processor import LogProcessor


def _run(**kw):
    base = dict(iter=0, epoch=0, max_iters=1000, max_epochs=None)
    return SimpleNamespace(**{**base, **kw})


def test_training_lines_by_iteration_and_by_epoch():
    p = LogProcessor()
    p.start_train(_run(), max_iters=1000, per_epoch=45)
    line = p.train_line(None, 120, 0, {"loss": 0.4321}, {"lr": 1e-3, "grad_norm": 1.2},
                        {"time": 0.0123, "data_time": 0.001})
    assert re.fullmatch(r"Iter \[120/1000\]  lr: 1\.0000e-03  eta: \d+:\d\d:\d\d  time: 0\.0123  "
                        r"data_time: 0\.0010  loss: 0\.4321  grad_norm: 1\.2000", line), line

    p.start_train(_run(max_epochs=10, max_iters=450), max_iters=450, per_epoch=45)
    assert p.head(29, 75, 1) == "Epoch [2/10][30/45]"
    assert p.head(None, 75, 1) == "Iter [75/450]"  # after training, between two intervals


def test_a_dry_run_shows_where_it_stops():
    p = LogProcessor()
    p.start_train(_run(max_epochs=10, max_iters=370), max_iters=2, per_epoch=37)
    assert p.head(1, 2, 0) == "Epoch [1/1][2/2]"


def test_evaluation_lines():
    p = LogProcessor(log_metric_by_epoch=True)
    p.start_train(_run(max_epochs=10, max_iters=450), max_iters=450, per_epoch=45)
    p.start_eval()
    at = SimpleNamespace(iter=135, epoch=3)
    line = p.eval_line("val", True, at, {"val/accuracy": 0.95}, samples=360)
    assert re.fullmatch(r"Epoch\(val\) \[3/10\]  val/accuracy: 0\.9500  samples: 360  "
                        r"duration: \d+\.\d\ds", line), line
    assert p.metrics_by_epoch(True) and not p.metrics_by_epoch(False)
    assert p.eval_line("test", False, at, {}).startswith("Test (iteration 135)  duration: ")
    assert LogProcessor().eval_line("val", True, at, {}).startswith("Iter(val) [135/0]")
