"""DefaultSampler: determinism, rank split, padding, skip and state."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from libai.data import DefaultSampler, SeededDataset, build_dataloader, sample_seed
from libai.utils.errors import DataError


class CountingDataset(Dataset):
    """Returns its index and records every index it was asked for."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        self.loaded.append(i)
        return i


def order(sampler: DefaultSampler) -> list[int]:
    return list(iter(sampler))


def test_same_seed_and_epoch_give_same_order():
    a = DefaultSampler(range(50), seed=3, rank=0, world_size=1)
    b = DefaultSampler(range(50), seed=3, rank=0, world_size=1)
    for epoch in (0, 5):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        assert order(a) == order(b)
    assert sorted(order(a)) == list(range(50))


def test_global_rng_is_untouched():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    order(DefaultSampler(range(50), seed=3, world_size=1, rank=0))
    DefaultSampler(range(50), seed=None, world_size=1, rank=0)
    assert torch.equal(torch.rand(3), expected)


def test_epochs_and_seeds_differ():
    s = DefaultSampler(range(100), seed=0, rank=0, world_size=1)
    first = order(s)
    s.set_epoch(1)
    assert order(s) != first
    assert order(DefaultSampler(range(100), seed=1, rank=0, world_size=1)) != first


def test_no_shuffle_is_sequential():
    s = DefaultSampler(range(7), shuffle=False, rank=0, world_size=1)
    s.set_epoch(4)
    assert order(s) == list(range(7))


@pytest.mark.parametrize("size,world", [(10, 3), (12, 4), (2, 5), (1, 1)])
def test_rank_split_disjoint_positions_and_complete(size, world):
    samplers = [DefaultSampler(range(size), seed=7, rank=r, world_size=world) for r in range(world)]
    full = samplers[0].epoch_indices()
    per_rank = [order(s) for s in samplers]
    expected_len = -(-size // world)
    assert all(len(p) == expected_len == len(s) for p, s in zip(per_rank, samplers))
    # Interleaving the ranks back gives the padded epoch order: disjoint slots, nothing lost.
    merged = [per_rank[i % world][i // world] for i in range(expected_len * world)]
    assert merged == full
    assert set(merged) == set(range(size))
    # Padding repeats the order from its start.
    unpadded = full[:size]
    assert sorted(unpadded) == list(range(size))
    assert full[size:] == (unpadded * world)[: len(full) - size]


def test_no_round_up_drops_nothing_and_lengths_may_differ():
    samplers = [
        DefaultSampler(range(10), seed=0, round_up=False, rank=r, world_size=3) for r in range(3)
    ]
    lengths = [len(order(s)) for s in samplers]
    assert lengths == [len(s) for s in samplers] == [4, 3, 3]
    assert sorted(i for s in samplers for i in order(s)) == list(range(10))


def test_skip_yields_the_tail_once():
    s = DefaultSampler(range(20), seed=1, rank=1, world_size=2)
    s.set_epoch(2)
    full = order(s)
    s.skip(4)
    s.set_epoch(2)  # same epoch: the skip survives
    assert order(s) == full[4:]
    assert order(s) == full  # one-shot
    assert len(s) == 10  # always the full per-rank length
    s.skip(3)
    s.set_epoch(3)  # new epoch: the skip is dropped
    assert len(order(s)) == 10
    with pytest.raises(DataError, match="skip"):
        s.skip(11)


def test_skip_does_not_load_skipped_samples():
    ds = CountingDataset(24)
    sampler = DefaultSampler(ds, seed=0, rank=0, world_size=1)
    sampler.set_epoch(1)
    full = sampler.rank_indices()
    sampler.skip(10)
    loader = DataLoader(ds, batch_size=4, sampler=sampler)
    seen = [i for batch in loader for i in batch.tolist()]
    assert seen == full[10:]
    assert ds.loaded == full[10:]


def test_state_dict_round_trip():
    a = DefaultSampler(range(30), seed=None, rank=0, world_size=1)
    a.set_epoch(6)
    state = a.state_dict()
    assert set(state) == {"epoch", "seed", "shuffle"}
    b = DefaultSampler(range(30), seed=123, rank=0, world_size=1)
    b.load_state_dict(state)
    assert (b.epoch, b.seed) == (6, a.seed)
    assert order(b) == order(a)
    with pytest.warns(UserWarning, match="shuffle"):
        DefaultSampler(range(30), shuffle=False, rank=0, world_size=1).load_state_dict(state)
    with pytest.raises(DataError, match="seed"):
        b.load_state_dict({"epoch": 1})


def test_bad_arguments():
    with pytest.raises(DataError, match="empty"):
        DefaultSampler([], rank=0, world_size=1)
    with pytest.raises(DataError, match="rank"):
        DefaultSampler(range(3), rank=2, world_size=2)


def test_seed_per_sample_pairs():
    s = DefaultSampler(range(8), seed=5, rank=0, world_size=1, seed_per_sample=True)
    s.set_epoch(2)
    keys = order(s)
    assert [k.index for k in keys] == s.rank_indices()
    assert all(k.seed == sample_seed(5, 2, k.index) and k.epoch == 2 for k in keys)


class NoisyDataset(CountingDataset):
    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.rand(2) + i


@pytest.mark.parametrize("num_workers", [0, 2])
def test_seed_per_sample_resume_is_exact(num_workers):
    cfg = dict(
        dataset=NoisyDataset(16),
        sampler=dict(type="DefaultSampler", seed_per_sample=True),
        batch_size=2,
        num_workers=num_workers,
    )
    full_loader = build_dataloader(cfg, seed=0)
    assert isinstance(full_loader.dataset, SeededDataset)
    full = torch.cat(list(full_loader))
    torch.manual_seed(1234)  # the global RNG state differs in the "resumed" process
    resumed = build_dataloader(cfg, seed=0)
    resumed.sampler.skip(6)
    assert torch.equal(torch.cat(list(resumed)), full[6:])
