"""val_cfg/test_cfg ``limit_batches``: only the first batches of each set are evaluated, on every
process alike, and the metrics are those of exactly the evaluated samples."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from libai import Runner
from libai.hooks import Hook
from libai.loops import ValLoop
from libai.testing import ToyDataset, toy_config
from libai.utils.errors import ConfigError

NUM_SAMPLES, BATCH = 36, 8  # 5 batches, the last one of 4
QUIET = dict(logger=dict(progress_bar=False, plot=False), checkpoint=None)


class CountHook(Hook):
    def __init__(self) -> None:
        self.batches = {"val": 0, "test": 0}

    def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.batches["val"] += 1

    def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.batches["test"] += 1


def _loader(num_samples: int = NUM_SAMPLES) -> dict:
    return dict(dataset=dict(type="ToyDataset", num_samples=num_samples, seed=1),
                sampler=dict(type="DefaultSampler", shuffle=False), batch_size=BATCH,
                num_workers=0)


def _runner(tmp_path, fast_dev_run: int = 0, val_dataloader=None,
            **overrides) -> tuple[Runner, CountHook]:
    cfg = toy_config(work_dir=str(tmp_path), default_hooks=QUIET, **overrides)
    cfg["val_dataloader"] = val_dataloader or _loader()  # whole: a dict of sets is not merged
    runner = Runner.from_cfg(cfg, fast_dev_run=fast_dev_run)
    hook = CountHook()
    runner.register_hook(hook)
    return runner, hook


def _by_hand(model: torch.nn.Module, count: int) -> tuple[float, float]:
    """Accuracy and mean cross-entropy of ``model`` over the first ``count`` samples, on the
    model's device (the runner's: CUDA where there is one)."""
    data = ToyDataset(num_samples=NUM_SAMPLES, seed=1)
    device = next(model.parameters()).device
    inputs, labels = data.inputs[:count].to(device), data.labels[:count].to(device)
    model.eval()
    with torch.no_grad():
        logits = model({"inputs": inputs})["logits"]
    accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
    return accuracy, F.cross_entropy(logits, labels).item()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.filterwarnings("error::RuntimeWarning")  # the evaluator counted what it was told
@pytest.mark.parametrize("limit, batches, samples", [
    (2, 2, 16), (0.5, 3, 24), (0.1, 1, 8), (1.0, 5, 36), (100, 5, 36), (None, 5, 36)])
def test_only_the_first_batches_are_evaluated(tmp_path, limit, batches, samples):
    runner, hook = _runner(tmp_path, val_cfg=dict(limit_batches=limit))
    lines = _Lines()
    logging.getLogger("libai").addHandler(lines)
    try:
        metrics = runner.val()
        runner.val()  # the line is said once per run, not at every evaluation
    finally:
        logging.getLogger("libai").removeHandler(lines)
    assert hook.batches["val"] == 2 * batches
    assert runner.message_hub.get_info("eval_samples") == samples
    accuracy, loss = _by_hand(runner.model, samples)
    assert metrics["val/accuracy"] == pytest.approx(accuracy)
    # batches of 8 against one batch: float32 sums in another order (rel 1e-5 on CPU and CUDA)
    assert metrics["val/loss"] == pytest.approx(loss, rel=1e-5)
    said = [line for line in lines.lines if "limit_batches" in line]
    expected = f"val: {batches} of 5 batches (limit_batches={limit})"
    assert said == ([] if limit is None else [expected])


def test_fast_dev_run_caps_the_limit(tmp_path):
    runner, hook = _runner(tmp_path, fast_dev_run=1, val_cfg=dict(limit_batches=3))
    runner.val()
    assert hook.batches["val"] == 1


def test_test_loop_and_named_sets(tmp_path):
    runner, hook = _runner(
        tmp_path, val_dataloader=dict(a=_loader(), b=_loader(20)), val_cfg=dict(limit_batches=1),
        test_dataloader=_loader(), test_evaluator=dict(type="Accuracy"),
        test_cfg=dict(type="TestLoop", limit_batches=0.4))
    metrics = runner.val()
    assert hook.batches["val"] == 2 and set(metrics) >= {"val/a/accuracy", "val/b/accuracy"}
    assert metrics["val/a/accuracy"] == pytest.approx(_by_hand(runner.model, 8)[0])
    metrics = runner.test()
    assert hook.batches["test"] == 2  # ceil(0.4 x 5)
    assert metrics["test/accuracy"] == pytest.approx(_by_hand(runner.model, 16)[0])


@pytest.mark.parametrize("value", [0, -1, 1.5, 0.0, "10", True, [2]])
def test_bad_values_name_the_key(tmp_path, value):
    with pytest.raises(ConfigError, match=r"val_cfg\.limit_batches=.*expected a whole number"):
        _runner(tmp_path, val_cfg=dict(limit_batches=value))  # preflight: before anything is built
    with pytest.raises(ConfigError, match=r"val_cfg\.limit_batches=.*expected a whole number"):
        ValLoop(None, [], None, limit_batches=value)


# --------------------------------------------------------------------------- two processes
WORLD_SIZE = 2


def _worker(out_dir: str) -> dict:
    """One rank (spawn_ranks gives it torchrun's environment): what it evaluated."""
    dist.init_process_group("gloo")
    try:  # 37 samples: rank 0 has 19 (3 batches), rank 1 has 18 (3 batches, the last of 2)
        cfg = toy_config(work_dir=out_dir, default_hooks=QUIET, val_dataloader=dict(
            _loader(), dataset=dict(type="ToyDataset", num_samples=37, seed=1)),
            val_cfg=dict(limit_batches=2))
        runner = Runner.from_cfg(cfg)
        hook = CountHook()
        runner.register_hook(hook)
        metrics = runner.val()
        state = {k: v.tolist() for k, v in runner.unwrapped_model.state_dict().items()}
        return dict(metrics=metrics, batches=hook.batches["val"],
                    samples=runner.message_hub.get_info("eval_samples"), state=state)
    finally:
        dist.destroy_process_group()


def test_two_processes_evaluate_the_same_first_samples(tmp_path, spawn_ranks):
    runs = spawn_ranks(WORLD_SIZE, _worker, str(tmp_path), timeout=300).check()
    results = [run.value for run in runs.ranks]
    assert [r["batches"] for r in results] == [2, 2]
    assert results[0]["metrics"] == results[1]["metrics"]
    assert results[0]["samples"] == 32  # 2 batches x 8 x 2 ranks: samples 0..31, each once
    from libai.testing import ToyModel

    model = ToyModel()
    model.load_state_dict({k: torch.tensor(v) for k, v in results[0]["state"].items()})
    data = ToyDataset(num_samples=37, seed=1)
    with torch.no_grad():
        logits = model.eval()({"inputs": data.inputs[:32]})["logits"]
    accuracy = (logits.argmax(dim=1) == data.labels[:32]).float().mean().item()
    assert results[0]["metrics"]["val/accuracy"] == pytest.approx(accuracy)
    assert results[0]["metrics"]["val/loss"] == pytest.approx(
        F.cross_entropy(logits, data.labels[:32]).item(), rel=1e-5)
