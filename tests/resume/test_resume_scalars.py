"""The scalar logs of a work dir stay one series across a resume: no repeated or backwards steps."""

import json

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


def test_tensorboard_and_jsonl_hold_each_step_once_after_resume(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    Runner.from_cfg(_cfg(tmp_path)).train()  # logs steps 1..10
    Runner.from_cfg(_cfg(tmp_path, resume=str(tmp_path / "iter_5.pth"))).train()  # 6..10 again

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    steps = [e.step for e in events.Scalars("train/loss")]
    assert steps == list(range(1, 11)), steps  # the first attempt's 6..10 are purged
    rows = [json.loads(line) for line in open(tmp_path / "scalars.jsonl")]
    assert [r["step"] for r in rows if "train/loss" in r] == list(range(1, 11))


def test_a_fresh_run_in_a_used_work_dir_starts_a_new_series(tmp_path):
    Runner.from_cfg(_cfg(tmp_path)).train()
    Runner.from_cfg(_cfg(tmp_path, max_iters=4)).train()
    rows = [json.loads(line) for line in open(tmp_path / "scalars.jsonl")]
    assert [r["step"] for r in rows if "train/loss" in r] == [1, 2, 3, 4]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4]
