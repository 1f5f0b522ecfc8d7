"""Counting FLOPs cannot end a run: a counter that fails is one warning line, and training goes on.
device="cpu": the claim is about the hook's error handling, the same on every device."""

import os

import torch
import torch.nn.functional as F
from torch import nn

from libai.runner import Runner


class LinearNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(5, 3)

    def forward(self, batch):
        return {"loss": F.cross_entropy(self.fc(batch["inputs"]), batch["labels"])}


def _train(tmp_path, max_iters=4):
    from libai.testing import ToyDataset

    runner = Runner.from_cfg(dict(
        model=LinearNet(), work_dir=str(tmp_path), device="cpu",
        train_dataloader=dict(dataset=ToyDataset(num_samples=24, in_features=5, num_classes=3),
                              batch_size=6, sampler=dict(type="DefaultSampler", shuffle=False)),
        train_cfg=dict(type="IterBasedTrainLoop", max_iters=max_iters),
        optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.1)),
        default_hooks=dict(checkpoint=None, logger=dict(
            interval=2, progress_bar=False, plot=False,
            backends=[dict(type="JsonlBackend", flush_secs=0)])),
        randomness=dict(seed=0)))
    runner.train()
    with open(os.path.join(runner.log_dir, f"{runner.timestamp}.log")) as f:
        return runner, f.read()


def _refuse(*args, **kwargs):
    # what torch 2.11's SDPA formula did with Llama's grouped-query attention (issue 35)
    raise AssertionError("sdpa_flop_count: query/key/value shapes are incompatible")


def test_a_failing_formula_is_one_warning_and_the_run_trains_to_the_end(tmp_path, monkeypatch):
    from torch.utils import flop_counter

    aten = torch.ops.aten
    for op in (aten.addmm, aten.mm):  # nn.Linear's forward and backward
        monkeypatch.setitem(flop_counter.flop_registry, op, _refuse)
    runner, log = _train(tmp_path)
    assert runner.iter == 4  # trained to the end
    said = [line for line in log.splitlines() if "FLOPs unknown" in line]
    assert len(said) == 1 and "WARNING" in said[0], said
    assert "aten.addmm: AssertionError: sdpa_flop_count" in said[0]
    assert "no TFLOP/s or MFU" in said[0]
    assert "FLOP/s" not in log.replace("TFLOP/s or MFU", "")  # no figure from a partial count
    assert runner.message_hub.get_info("flops_per_step") is None


def test_a_counter_that_cannot_start_is_one_warning(tmp_path, monkeypatch):
    from libai.model import flops

    def refuse(self):
        raise RuntimeError("no dispatch mode here")

    monkeypatch.setattr(flops.SafeFlopCounter, "__enter__", refuse)
    runner, log = _train(tmp_path)
    assert runner.iter == 4
    said = [line for line in log.splitlines() if "FLOPs unknown" in line]
    assert len(said) == 1 and "the counter did not start (RuntimeError: no dispatch mode" in said[0]
