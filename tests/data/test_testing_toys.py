"""libai.testing: ToyDataset, ToyModel, DigitsMLP and toy_config."""

from __future__ import annotations

import pytest
import torch

from libai.data import default_collate
from libai.model import DigitsMLP
from libai.registry import DATASETS, MODELS
from libai.runner import Runner
from libai.testing import ToyDataset, ToyModel, toy_config
from libai.utils.errors import ConfigError


def test_toy_dataset_is_seeded_and_shaped():
    a, b = ToyDataset(num_samples=10, in_features=3, num_classes=3), ToyDataset(10, 3, 3)
    assert torch.equal(a.inputs, b.inputs) and len(a) == 10
    item = a[4]
    assert item["inputs"].shape == (3,) and item["labels"].dtype == torch.int64
    assert int(item["labels"]) == 1
    assert not torch.equal(a.inputs, ToyDataset(10, 3, 3, seed=1).inputs)


@pytest.mark.parametrize("cls,ds", [(ToyModel, ToyDataset(16)), (DigitsMLP, None)])
def test_model_contract(cls, ds):
    if ds is None:
        ds = ToyDataset(16, in_features=64, num_classes=10)
    batch = default_collate([ds[i] for i in range(4)])
    model = cls()
    model.train()
    out = model(batch)
    assert set(out) == {"loss", "acc"}
    assert out["loss"].requires_grad and out["loss"].ndim == 0
    assert not out["acc"].requires_grad
    model.eval()
    with torch.no_grad():
        out = model(batch)
    assert set(out) == {"logits", "loss"}
    assert out["logits"].shape == (4, ds.num_classes)
    out = model({"inputs": batch["inputs"]})
    assert set(out) == {"logits"}


def test_toy_model_learns():
    torch.manual_seed(0)
    ds = ToyDataset(64)
    batch = default_collate([ds[i] for i in range(64)])
    model = ToyModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(30):
        loss = model(batch)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert model(batch)["acc"] > 0.9


def test_registered():
    assert MODELS.get("ToyModel") is ToyModel and MODELS.get("DigitsMLP") is DigitsMLP
    assert DATASETS.get("ToyDataset") is ToyDataset


def test_toy_config_overrides():
    cfg = toy_config(work_dir="/tmp/x", train_cfg=dict(max_iters=5))
    assert cfg["work_dir"] == "/tmp/x"
    assert cfg["train_cfg"] == dict(type="IterBasedTrainLoop", max_iters=5, val_interval=10)
    cfg = toy_config(train_cfg=dict(type="EpochBasedTrainLoop", max_epochs=2))
    assert cfg["train_cfg"] == dict(type="EpochBasedTrainLoop", max_epochs=2)
    assert toy_config(val_dataloader=None)["val_dataloader"] is None
    fresh = toy_config()
    fresh["model"]["num_classes"] = 5
    assert toy_config()["model"]["num_classes"] == 2
    with pytest.raises(ConfigError, match="Did you mean 'train_dataloader'"):
        Runner.from_cfg(toy_config(work_dir="/tmp/x", train_dataloder={}))


def test_toy_config_parts_build():
    from libai.data import build_dataloader

    cfg = toy_config()
    model = MODELS.build(cfg["model"])
    loader = build_dataloader(cfg["train_dataloader"], seed=0, path="train_dataloader")
    out = model(next(iter(loader)))
    assert out["loss"].ndim == 0
