"""Resuming with a config that differs from the checkpoint's: a change to the schedule is refused
unless accepted explicitly; any other change is allowed and reported in the log."""

import logging

import pytest
import resume_helpers as rh

from libai.runner import Runner
from libai.utils.errors import ConfigError

OLD, NEW = 8, 12


def finished_run(work_dir):
    """A run of OLD iterations whose last checkpoint is iter_OLD.pth."""
    rh.train(rh.contract_config(work_dir, max_iters=OLD))


def resume_logged(cfg):
    """Resume ``cfg`` and train; returns the runner and the messages it logged."""
    runner = Runner.from_cfg(dict(cfg, resume=True, log_level="INFO"))
    records = rh.LogRecords()
    logging.getLogger("libai").addHandler(records)
    try:
        runner.train()
    finally:
        logging.getLogger("libai").removeHandler(records)
    return runner, "\n".join(records.messages)


def test_changed_max_iters_is_refused_with_the_fix_in_the_message(tmp_path):
    finished_run(tmp_path)
    changed = rh.contract_config(tmp_path, max_iters=NEW)
    runner = Runner.from_cfg(dict(changed, resume=True))
    rh.LOADED.clear()
    with pytest.raises(ConfigError) as exc:
        runner.train()
    message = str(exc.value)
    assert "train_cfg.max_iters" in message
    assert str(OLD) in message and str(NEW) in message
    assert "resume_options=dict(allow_changes=['train_cfg.max_iters'])" in message
    assert not rh.LOADED  # refused before training anything
    assert not (tmp_path / f"iter_{NEW}.pth").exists()


def test_changed_max_iters_resumes_when_allowed(tmp_path):
    finished_run(tmp_path)
    changed = rh.contract_config(
        tmp_path, max_iters=NEW, resume_options=dict(allow_changes=["train_cfg.max_iters"])
    )
    rh.LOADED.clear()
    runner, log = resume_logged(changed)
    assert f"Resumed from {tmp_path / f'iter_{OLD}.pth'}" in log
    assert "train_cfg.max_iters" in log  # the accepted change is reported
    assert runner.iter == NEW
    assert len(rh.LOADED) == (NEW - OLD) * rh.BATCH  # exactly the new iterations were trained
    assert (tmp_path / f"iter_{NEW}.pth").exists()
    rh.assert_steps_are_one_series(tmp_path, NEW)


def test_unrelated_change_is_allowed_and_reported(tmp_path):
    cfg = rh.contract_config(tmp_path / "resumed", max_iters=NEW)
    straight = rh.train(rh.contract_config(tmp_path / "straight", max_iters=NEW))
    rh.train_interrupted(cfg, at=OLD)
    cfg["default_hooks"]["logger"]["interval"] = 2
    runner, log = resume_logged(cfg)
    assert "default_hooks.logger.interval" in log
    assert runner.iter == NEW
    rh.assert_same_model(straight.unwrapped_model, runner.unwrapped_model)
