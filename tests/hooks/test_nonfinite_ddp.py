"""Two processes (DDP, gloo on CPU): a NaN loss on one rank only stops every rank, each naming
the same first bad iteration, instead of leaving the healthy rank waiting in a collective."""

import re

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


def test_nan_on_one_rank_stops_both(tmp_path, spawn_ranks):
    # forked ranks (the claim is the ranks' agreement, not torchrun's): each rank's own exit and
    # output; one that waited in a collective would be killed at the timeout (status -9)
    (tmp_path / "nan_model.py").write_text(MODEL)  # found in the working directory
    (tmp_path / "cfg.py").write_text(CONFIG)
    ranks = spawn_ranks(2, "tools/train.py", tmp_path / "cfg.py", "--work-dir", tmp_path / "work",
                        cwd=tmp_path, timeout=100)
    assert all(r.returncode not in (0, -9) for r in ranks.ranks), ranks.output[-3000:]
    # one error per rank, both naming rank 1's iteration
    errors = [re.findall(r"Non-finite loss at iteration (\d+): (loss=nan|the values are on "
                         r"another process)", r.output) for r in ranks.ranks]
    assert errors == [[("3", "the values are on another process")], [("3", "loss=nan")]], \
        ranks.output[-3000:]
    assert not list((tmp_path / "work").glob("*.pth"))  # nothing saved from the NaN weights
