"""Each run's scalars are its own: a fresh run starts a series in its own run folder, a resumed
run continues the series of its checkpoint, with no repeated, lost or backwards steps."""

import json
import os

from libai.runner import Runner
from libai.testing import toy_config


def _cfg(work_dir, max_iters=10, **kw):
    return toy_config(
        work_dir=str(work_dir),
        train_cfg=dict(max_iters=max_iters, val_interval=100),
        default_hooks=dict(logger=dict(interval=1, progress_bar=False, plot=False),
                           checkpoint=dict(interval=5)),
        **kw,
    )


def _train_steps(path):
    return [r["step"] for r in map(json.loads, open(path)) if "train/loss" in r]


def _tb_steps(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(os.path.join(folder, "tensorboard"))
    events.Reload()
    return [e.step for e in events.Scalars("train/loss")]


def test_tensorboard_and_jsonl_hold_each_step_once_after_resume(tmp_path):
    first = Runner.from_cfg(_cfg(tmp_path))
    first.train()  # logs steps 1..10 into its run folder
    series = first.log_dir
    before = open(os.path.join(series, "scalars.jsonl")).read()
    again = Runner.from_cfg(_cfg(tmp_path, resume=str(tmp_path / "iter_5.pth")))
    again.train()  # 6..10 again, into the same series

    assert again.series_dir == series != again.log_dir
    assert not os.path.exists(os.path.join(again.log_dir, "scalars.jsonl"))
    assert _tb_steps(series) == list(range(1, 11))  # the first attempt's 6..10 are purged
    assert _train_steps(os.path.join(series, "scalars.jsonl")) == list(range(1, 11))
    # the rows the resume superseded are set aside, byte for byte, never cut
    assert open(os.path.join(series, "scalars.jsonl.1")).read() == before


def test_a_fresh_run_in_a_used_work_dir_starts_a_new_series(tmp_path):
    first = Runner.from_cfg(_cfg(tmp_path))
    first.train()
    old = {n: open(os.path.join(first.log_dir, n), "rb").read() for n in ("scalars.jsonl",)}
    second = Runner.from_cfg(_cfg(tmp_path, max_iters=4))
    second.train()
    assert second.log_dir != first.log_dir  # even when started in the same second
    assert _train_steps(os.path.join(second.log_dir, "scalars.jsonl")) == [1, 2, 3, 4]
    assert _tb_steps(second.log_dir) == [1, 2, 3, 4]
    assert _tb_steps(first.log_dir) == list(range(1, 11))  # the first run's curves are intact
    assert {n: open(os.path.join(first.log_dir, n), "rb").read() for n in old} == old
