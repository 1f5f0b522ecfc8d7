"""build_dataloader: keys, errors, collate functions and worker seeding."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import Dataset

from libai.data import (
    DefaultSampler,
    build_dataloader,
    dataloader_len,
    default_collate,
    pseudo_collate,
    worker_seed,
)
from libai.testing import ToyDataset
from libai.utils.errors import ConfigError, DataError


def test_builds_from_dicts():
    loader = build_dataloader(
        dict(dataset=dict(type="ToyDataset", num_samples=20), batch_size=8), seed=0
    )
    assert isinstance(loader.sampler, DefaultSampler)
    assert loader.sampler.shuffle and loader.sampler.seed == 0
    assert dataloader_len(loader) == 3
    batch = next(iter(loader))
    assert batch["inputs"].shape == (8, 8) and batch["labels"].shape == (8,)


def test_rank_and_world_size_reach_the_sampler():
    cfg = dict(dataset=ToyDataset(num_samples=10), batch_size=2, sampler=dict(shuffle=False))
    loader = build_dataloader(cfg, seed=0, world_size=2, rank=1)
    assert (loader.sampler.rank, loader.sampler.world_size) == (1, 2)
    assert loader.sampler.rank_indices() == [1, 3, 5, 7, 9]


def test_unknown_key_names_path_and_suggests():
    cfg = dict(dataset=ToyDataset(), batchsize=8)
    with pytest.raises(ConfigError) as info:
        build_dataloader(cfg, path="train_dataloader")
    msg = str(info.value)
    assert "'train_dataloader.batchsize'" in msg
    assert "Did you mean 'batch_size'" in msg


@pytest.mark.parametrize(
    "cfg,match",
    [
        (dict(batch_size=2), "dataset"),
        (dict(dataset=ToyDataset()), "batch_size"),
        (dict(dataset=ToyDataset(), batch_size=0), "batch_size"),
        (dict(dataset=ToyDataset(), batch_size=2, num_workers=-1), "num_workers"),
        (dict(dataset=ToyDataset(), batch_size=2, persistent_workers=True), "num_workers"),
        (dict(dataset=ToyDataset(), batch_size=2, collate_fn=3), "collate_fn"),
    ],
)
def test_invalid_configs(cfg, match):
    with pytest.raises(ConfigError, match=match):
        build_dataloader(cfg)


def test_collate_by_name_and_dict():
    ds = ToyDataset(num_samples=4)
    loader = build_dataloader(dict(dataset=ds, batch_size=4, collate_fn="pseudo_collate"))
    batch = next(iter(loader))
    assert isinstance(batch["inputs"], list) and len(batch["inputs"]) == 4
    loader = build_dataloader(
        dict(dataset=ds, batch_size=4, collate_fn=dict(type="default_collate"))
    )
    assert next(iter(loader))["inputs"].shape == (4, 8)


def test_pseudo_collate_shapes():
    items = [{"x": [1, 2], "m": {"k": i}} for i in range(3)]
    assert pseudo_collate(items) == {"x": [[1, 2]] * 3, "m": {"k": [0, 1, 2]}}
    assert pseudo_collate([(1, "a"), (2, "b")]) == ([1, 2], ["a", "b"])
    assert pseudo_collate([]) == []
    assert default_collate([{"a": torch.ones(2)}] * 3)["a"].shape == (3, 2)


class RandomItems(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.rand(1)


def test_seeded_workers_are_reproducible():
    cfg = dict(dataset=RandomItems(), batch_size=2, num_workers=2, sampler=dict(shuffle=False))
    a = torch.cat(list(build_dataloader(cfg, seed=0)))
    b = torch.cat(list(build_dataloader(cfg, seed=0)))
    c = torch.cat(list(build_dataloader(cfg, seed=1)))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert worker_seed(0, 0, 1) != worker_seed(0, 1, 0) != worker_seed(1, 0, 0)


def test_iterating_does_not_consume_global_rng():
    loader = build_dataloader(dict(dataset=ToyDataset(), batch_size=8), seed=0)
    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    list(loader)
    assert torch.equal(torch.rand(2), expected)


def test_dataloader_len_without_len():
    with pytest.raises(DataError, match="no length"):
        dataloader_len(iter([1, 2]))
