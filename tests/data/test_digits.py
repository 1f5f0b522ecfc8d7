"""DigitsDataset and the transforms."""

from __future__ import annotations

import pytest
import torch

from libai.data import Compose, DigitsDataset, RandomNoise, RandomShift, build_transform
from libai.registry import DATASETS
from libai.utils.errors import DataError

pytest.importorskip("sklearn")


def test_splits_cover_all_digits_once():
    splits = {s: DigitsDataset(s, val_ratio=0.2, test_ratio=0.1) for s in ("train", "val", "test")}
    assert sum(len(d) for d in splits.values()) == 1797
    assert len(DigitsDataset("all")) == 1797
    assert (len(splits["val"]), len(splits["test"])) == (359, 180)
    rows = sorted(i for d in splits.values() for i in d.indices.tolist())
    assert rows == list(range(1797))  # disjoint and complete


def test_items_and_ranges():
    ds = DigitsDataset("train")
    assert len(ds) == 1438
    item = ds[0]
    assert item["inputs"].shape == (64,) and item["inputs"].dtype == torch.float32
    assert item["labels"].shape == () and item["labels"].dtype == torch.int64
    assert 0.0 <= ds.inputs.min() and ds.inputs.max() <= 1.0
    assert set(ds.labels.tolist()) == set(range(10))
    raw = DigitsDataset("train", normalize=False)
    assert raw.inputs.max() == 16.0


def test_split_is_fixed():
    assert torch.equal(DigitsDataset("val").labels, DigitsDataset("val").labels)


def test_registry_and_errors():
    ds = DATASETS.build(dict(type="DigitsDataset", split="val"))
    assert len(ds) == 359
    with pytest.raises(DataError, match="Did you mean 'val'"):
        DigitsDataset("vall")
    with pytest.raises(DataError, match="empty"):
        DigitsDataset("test")
    with pytest.raises(DataError, match="val_ratio"):
        DigitsDataset(val_ratio=0.6, test_ratio=0.5)


def test_transforms_from_config_are_reproducible():
    ds = DigitsDataset(
        "val", transform=[dict(type="RandomShift", max_shift=1), dict(type="RandomNoise", std=0.1)]
    )
    assert isinstance(ds.transform, Compose)
    torch.manual_seed(0)
    a = torch.stack([ds[i]["inputs"] for i in range(10)])
    torch.manual_seed(0)
    b = torch.stack([ds[i]["inputs"] for i in range(10)])
    assert torch.equal(a, b)
    assert not torch.equal(a, ds.inputs[:10])
    assert 0.0 <= a.min() and a.max() <= 1.0
    assert torch.equal(ds.inputs, DigitsDataset("val").inputs)  # stored data untouched


def test_random_shift_moves_pixels():
    img = torch.zeros(8, 8)
    img[3, 4] = 1.0
    item = {"inputs": img.flatten()}
    seen = set()
    for seed in range(40):
        torch.manual_seed(seed)
        out = RandomShift(max_shift=1)(item)["inputs"].reshape(8, 8)
        assert out.sum() == 1.0
        y, x = (out == 1.0).nonzero()[0].tolist()
        assert abs(y - 3) <= 1 and abs(x - 4) <= 1
        seen.add((y, x))
    assert len(seen) > 3
    assert RandomShift(max_shift=0)(item)["inputs"].equal(item["inputs"])
    assert RandomShift(max_shift=20)({"inputs": torch.ones(64)})["inputs"].shape == (64,)


def test_build_transform_specs():
    assert build_transform(None) is None and build_transform([]) is None
    noise = RandomNoise(std=0.0, clamp=None)
    assert build_transform(noise) is noise
    with pytest.raises(DataError, match="transform"):
        build_transform(3)
    with pytest.raises(DataError, match="no key"):
        noise({"x": torch.zeros(2)})
