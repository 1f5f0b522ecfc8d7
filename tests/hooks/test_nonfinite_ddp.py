"""Two processes (DDP, gloo on CPU): a NaN loss on one rank only stops every rank, each naming
the same first bad iteration, instead of leaving the healthy rank waiting in a collective."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MODEL = '''
import torch
import torch.distributed as dist
from torch import nn


class NaNOnRankOne(nn.Module):
    """A linear classifier whose loss is NaN on rank 1 at its 3rd training call."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)
        self.calls = 0

    def forward(self, batch):
        loss = nn.functional.cross_entropy(self.fc(batch["inputs"]), batch["labels"])
        if self.training:
            self.calls += 1
            if dist.get_rank() == 1 and self.calls == 3:
                loss = loss * float("nan")
        return {"loss": loss}
'''

CONFIG = """
model = dict(type="nan_model.NaNOnRankOne")
train_dataloader = dict(dataset=dict(type="ToyDataset", num_samples=64, seed=0),
                        sampler=dict(type="DefaultSampler", shuffle=True), batch_size=4)
train_cfg = dict(type="IterBasedTrainLoop", max_iters=6)
optim_wrapper = dict(optimizer=dict(type="SGD", lr=0.1))
default_hooks = dict(logger=dict(interval=2, progress_bar=False, plot=False))
env_cfg = dict(dist_timeout=120)
"""


@pytest.mark.slow
def test_nan_on_one_rank_stops_both(tmp_path):
    (tmp_path / "nan_model.py").write_text(MODEL)
    (tmp_path / "cfg.py").write_text(CONFIG)
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "tools/train.py", str(tmp_path / "cfg.py"), "--work-dir", str(tmp_path / "work")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    log = out.stdout + out.stderr
    assert out.returncode != 0, log[-3000:]
    # one error per rank (their stderr lines may interleave), both naming rank 1's iteration
    errors = re.findall(r"Non-finite loss at iteration (\d+): (loss=nan|the values are on another process)", log)
    assert sorted(errors) == [("3", "loss=nan"), ("3", "the values are on another process")], log[-3000:]
    assert not list((tmp_path / "work").glob("*.pth"))  # nothing saved from the NaN weights
