"""Data-parallel coordinates come from the layout: tensor-parallel peers read the same share, data
ranks read disjoint shares whose union is the epoch, and evaluation shares are not padded."""

import pytest

from libai.parallel import parse_parallel
from libai.runner.build import build_loader


@pytest.mark.parametrize("sizes,world,expected", [
    (dict(), 4, [(0, 4, 0, 1), (1, 4, 0, 1), (2, 4, 0, 1), (3, 4, 0, 1)]),
    (dict(tensor=2), 2, [(0, 1, 0, 2), (0, 1, 1, 2)]),
    (dict(fsdp=2, tensor=2), 4, [(0, 2, 0, 2), (0, 2, 1, 2), (1, 2, 0, 2), (1, 2, 1, 2)]),
    (dict(data=2, fsdp=2), 4, [(0, 4, 0, 1), (1, 4, 0, 1), (2, 4, 0, 1), (3, 4, 0, 1)]),
])
def test_the_layout_gives_each_process_its_share(sizes, world, expected):
    pc = parse_parallel(sizes, world)
    got = [pc.data_parallel(rank) for rank in range(world)]
    assert [(d.rank, d.size, d.replica, d.replicas) for d in got] == expected


def test_peers_read_one_share_and_shares_cover_the_epoch_once():
    """The runner's path for each of 4 ranks (fsdp=2 x tensor=2): its coordinates from the
    layout, its loader from build_loader."""
    pc = parse_parallel(dict(fsdp=2, tensor=2), 4)
    cfg = dict(dataset=list(range(11)), sampler=dict(type="DefaultSampler"), batch_size=2)
    loaders = [build_loader(dict(cfg), "train_dataloader", 3, pc.data_parallel(rank), False)
               for rank in range(4)]
    orders = [list(loader.sampler) for loader in loaders]
    batches = [[b.tolist() for b in loader] for loader in loaders]
    assert orders[0] == orders[1] and orders[2] == orders[3]  # tensor-parallel peers
    assert batches[0] == batches[1] and batches[2] == batches[3]  # batch for batch
    assert orders[0] != sorted(orders[0])  # shuffled: the peers agree on a drawn order
    assert len(set(orders[0]) & set(orders[2])) <= 1  # disjoint, but for the one padding sample
    assert set(orders[0]) | set(orders[2]) == set(range(11))


def test_evaluation_loaders_do_not_pad_the_shares():
    dp = parse_parallel(None, 2).data_parallel(1)
    cfg = dict(dataset=list(range(11)), sampler=dict(type="DefaultSampler", shuffle=False),
               batch_size=4)
    train = build_loader(dict(cfg), "train_dataloader", 0, dp, False)
    val = build_loader(dict(cfg), "val_dataloader", 0, dp, False)
    assert list(train.sampler) == [1, 3, 5, 7, 9, 0]  # padded: 12 over 2 ranks, 0 seen twice
    assert list(val.sampler) == [1, 3, 5, 7, 9]  # each sample once
    explicit = build_loader(dict(cfg, sampler=dict(type="DefaultSampler", shuffle=False,
                                                    round_up=True)), "val_dataloader", 0, dp, False)
    assert list(explicit.sampler) == [1, 3, 5, 7, 9, 0]  # the config's own choice wins


def test_a_loss_over_varying_items_becomes_the_mean_over_every_share(monkeypatch):
    """Rank 0 has 3 masked tokens (loss sum 6), rank 1 has 1 (sum 5): one process would report
    11 / 4. Each rank's scaled loss, averaged as DDP averages gradients, gives that mean."""
    import torch

    from libai.model import contract
    from libai.utils.dist import DataParallel

    counts = {0: 3.0, 1: 1.0}
    sums = {0: 6.0, 1: 5.0}
    monkeypatch.setattr(contract, "all_reduce_sum", lambda t: t.fill_(sum(counts.values())))
    scaled = []
    for rank in (0, 1):
        outputs = {"mlm_loss": torch.tensor(sums[rank] / counts[rank]), "nsp_loss": torch.tensor(1.0),
                   "num_items": {"mlm_loss": torch.tensor(counts[rank])}}
        out = contract.mean_over_data_parallel(outputs, DataParallel(rank, 2))
        assert out["nsp_loss"] is outputs["nsp_loss"]  # a per-sample mean: left as it is
        scaled.append(out["mlm_loss"])
    torch.testing.assert_close((scaled[0] + scaled[1]) / 2, torch.tensor(11 / 4))
    one = {"mlm_loss": torch.tensor(2.0), "num_items": {"mlm_loss": torch.tensor(3)}}
    assert contract.mean_over_data_parallel(one, DataParallel()) is one  # one share: untouched
