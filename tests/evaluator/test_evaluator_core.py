"""Evaluator, BaseMetric.evaluate (padding, ranks, prefix) and error messages."""

from __future__ import annotations

import pytest
import torch

from libai.evaluator import AUC, Accuracy, BaseMetric, Evaluator, build_evaluator
from libai.evaluator import base_metric as base_metric_module
from libai.registry import METRICS
from libai.utils import dist as dist_utils
from libai.utils.errors import ConfigError, DataError, LibaiError


class RecordIndex(BaseMetric):
    """Keeps each sample's dataset index, to check the order the metric sees."""

    def process(self, batch, outputs):
        self.results.extend(batch["index"].tolist())

    def compute_metrics(self, results):
        self.seen = list(results)
        return {"count": len(results)}


def sampler_split(size, world_size):
    """What the distributed sampler hands each rank: the padded index list, strided by rank."""
    indices = list(range(size))
    pad = (-size) % world_size
    indices += indices[:pad]
    return [indices[r::world_size] for r in range(world_size)]


def feed(metric, indices, batch_size=3):
    for i in range(0, len(indices), batch_size):
        metric.process({"index": torch.tensor(indices[i : i + batch_size])}, None)


# ------------------------------------------------------------------------ single process
def test_evaluate_single_process_keeps_order_and_clears_results():
    metric = RecordIndex()
    feed(metric, list(range(10)))
    assert metric.evaluate(10) == {"count": 10.0}
    assert metric.seen == list(range(10))
    assert metric.results == []


def test_evaluate_rejects_more_extra_results_than_padding_allows():
    # one process: no padding possible, so an extra result means process() broke the contract
    metric = RecordIndex()
    feed(metric, list(range(10)) + [0])
    with pytest.raises(DataError, match="one entry per sample"):
        metric.evaluate(10)


def test_evaluate_drops_sampler_padding(monkeypatch):
    size, world_size = 9, 4  # padded to 12: indices 0, 1, 2 are repeated at the end
    shares = sampler_split(size, world_size)
    assert sum(map(len, shares)) == 12
    monkeypatch.setattr(dist_utils, "get_world_size", lambda: world_size)
    monkeypatch.setattr(dist_utils, "all_gather_object", lambda obj: list(enumerate(shares)))
    metric = RecordIndex()
    assert metric.evaluate(size) == {"count": 9.0}
    assert metric.seen == list(range(size))
    assert metric.num_samples == size


def test_tensor_parallel_peers_count_once(monkeypatch):
    """4 processes, tensor=2: two data shares, each read by two processes. The second of each
    pair sends nothing, and every sample is counted once, in order."""
    size = 9
    shares = sampler_split(size, 2)
    sent = []

    def gather(obj):
        sent.append(obj)  # what this process (rank 0: share 0, replica 0) sends
        return [(0, shares[0]), (0, None), (1, shares[1]), (1, None)]

    monkeypatch.setattr(dist_utils, "get_world_size", lambda: 4)
    monkeypatch.setattr(dist_utils, "all_gather_object", gather)
    metric = RecordIndex()
    feed(metric, shares[0])
    dp = dist_utils.DataParallel(rank=0, size=2, replica=0, replicas=2)
    assert metric.evaluate(size, data_parallel=dp) == {"count": 9.0}
    assert metric.seen == list(range(size)) and metric.num_samples == size
    assert sent == [(0, shares[0])]

    peer = RecordIndex()  # the same share's second process: it sends no results
    feed(peer, shares[0])
    monkeypatch.setattr(dist_utils, "get_rank", lambda: 1)
    monkeypatch.setattr(dist_utils, "broadcast_object", lambda obj, src=0: {"count": 9.0})
    peer.evaluate(size, data_parallel=dist_utils.DataParallel(0, 2, replica=1, replicas=2))
    assert sent[-1] == (0, None)


def test_evaluate_warns_when_results_are_missing():
    metric = RecordIndex()
    feed(metric, list(range(6)))
    with pytest.warns(RuntimeWarning, match="6 results for a dataset of 8"):
        assert metric.evaluate(8) == {"count": 6.0}


def test_prefix_and_default_prefix():
    metric = Accuracy(prefix="val")
    metric.process({"labels": torch.tensor([0])}, torch.tensor([[1.0, 0.0]]))
    assert metric.evaluate(1) == {"val/accuracy": 1.0}

    class Counted(RecordIndex):
        default_prefix = "ids"

    metric = Counted()
    feed(metric, [0, 1])
    assert metric.evaluate(2) == {"ids/count": 2.0}
    metric = Counted(prefix="")
    feed(metric, [0, 1])
    assert metric.evaluate(2) == {"count": 2.0}


# ------------------------------------------------------------------------ simulated ranks
def test_two_simulated_ranks_restore_sampler_order(monkeypatch):
    size, world_size = 11, 2
    shares = sampler_split(size, world_size)
    per_rank = []
    for share in shares:
        m = RecordIndex()
        feed(m, share)
        per_rank.append(list(m.results))

    monkeypatch.setattr(dist_utils, "get_world_size", lambda: world_size)
    monkeypatch.setattr(dist_utils, "all_gather_object",
                        lambda obj: [(rank, part) for rank, part in enumerate(per_rank)])
    rank0 = RecordIndex()
    feed(rank0, shares[0])
    assert rank0.evaluate(size) == {"count": 11.0}
    assert rank0.seen == list(range(size))  # interleaved back, the repeated index 0 dropped

    # rank 1 does not compute; it takes what rank 0 broadcasts
    monkeypatch.setattr(dist_utils, "get_rank", lambda: 1)
    monkeypatch.setattr(dist_utils, "broadcast_object", lambda obj, src=0: {"count": 11.0})
    rank1 = RecordIndex()
    feed(rank1, shares[1])
    assert rank1.evaluate(size) == {"count": 11.0}
    assert not hasattr(rank1, "seen")


def test_failure_on_rank0_is_broadcast_before_raising(monkeypatch):
    class Broken(RecordIndex):
        def compute_metrics(self, results):
            raise ValueError("boom")

    sent = []
    monkeypatch.setattr(dist_utils, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist_utils, "all_gather_object", lambda obj: [(0, [0]), (1, [1])])
    monkeypatch.setattr(dist_utils, "broadcast_object", lambda obj, src=0: sent.append(obj))
    with pytest.raises(ValueError, match="boom"):
        Broken().evaluate(2)
    assert isinstance(sent[0], base_metric_module._RemoteFailure)

    # on the other rank, the failure becomes an error too, instead of a hang
    monkeypatch.setattr(dist_utils, "get_rank", lambda: 1)
    monkeypatch.setattr(dist_utils, "broadcast_object", lambda obj, src=0: sent[0])
    with pytest.raises(LibaiError, match="failed on rank 0.*boom"):
        Broken().evaluate(2)


# ------------------------------------------------------------------------------ Evaluator
def two_batches():
    logits = torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0], [0.2, 0.1]])
    labels = torch.tensor([0, 1, 1, 0])
    return [
        ({"labels": labels[:2]}, {"logits": logits[:2], "scores": logits[:2, 1]}),
        ({"labels": labels[2:]}, {"logits": logits[2:], "scores": logits[2:, 1]}),
    ]


def test_evaluator_merges_metrics_from_dicts_and_instances():
    evaluator = Evaluator([dict(type="Accuracy"), AUC(), dict(type="Accuracy", prefix="b")])
    for batch, outputs in two_batches():
        evaluator.process(batch, outputs)
    res = evaluator.evaluate(4)
    # AUC: positives score 3.0 and 0.0, negatives 1.0 and 0.1 -> 2 of 4 pairs ordered
    assert res == {"accuracy": 0.75, "auc": 0.5, "b/accuracy": 0.75}


def test_evaluator_duplicate_key_names_both_metrics():
    evaluator = Evaluator([dict(type="Accuracy"), dict(type="Accuracy", topk=1)])
    for batch, outputs in two_batches():
        evaluator.process(batch, outputs)
    with pytest.raises(ConfigError) as info:
        evaluator.evaluate(4)
    msg = str(info.value)
    assert "metrics[0] (Accuracy)" in msg and "metrics[1] (Accuracy)" in msg
    assert "'accuracy'" in msg and "prefix" in msg


def test_missing_key_lists_keys_and_suggests():
    batch, outputs = two_batches()[0]
    with pytest.raises(ConfigError) as info:
        Accuracy(pred_key="logit").process(batch, outputs)
    msg = str(info.value)
    assert "pred_key='logit'" in msg and "Did you mean 'logits'" in msg
    assert "'scores'" in msg and "'labels'" in msg  # keys of both places are listed
    with pytest.raises(ConfigError, match="Did you mean 'labels'"):
        AUC(label_key="label").process(batch, outputs)
    with pytest.raises(ConfigError, match="not a dict but a tuple"):
        Accuracy().process((torch.zeros(2, 3), torch.zeros(2)), torch.zeros(2, 3))


def test_label_is_taken_from_outputs_before_batch():
    batch = {"labels": torch.tensor([0, 0])}
    outputs = {"logits": torch.tensor([[0.0, 1.0], [0.0, 1.0]]), "labels": torch.tensor([1, 1])}
    evaluator = Evaluator(dict(type="Accuracy"))
    evaluator.process(batch, outputs)
    assert evaluator.evaluate(2) == {"accuracy": 1.0}


def test_build_evaluator_accepts_every_form():
    metric = Accuracy()
    built = [
        build_evaluator(dict(type="Accuracy")),
        build_evaluator([dict(type="Accuracy"), dict(type="AUC")]),
        build_evaluator(dict(type="Evaluator", metrics=[dict(type="Accuracy")])),
        build_evaluator(metric),
    ]
    assert all(isinstance(e, Evaluator) for e in built)
    assert [type(m).__name__ for m in built[1].metrics] == ["Accuracy", "AUC"]
    assert built[3].metrics == [metric]
    evaluator = Evaluator([metric])
    assert build_evaluator(evaluator) is evaluator
    with pytest.raises(ConfigError, match="None"):
        build_evaluator(None)
    with pytest.raises(ConfigError, match="empty"):
        build_evaluator([])
    with pytest.raises(LibaiError, match="Accuracy"):
        build_evaluator(dict(type="Acuracy"))


def test_custom_metric_registered_and_built_by_name():
    @METRICS.register_module(force=True)
    class LabelMeanMetric(BaseMetric):
        def process(self, batch, outputs):
            self.results.extend(batch["labels"].float().tolist())

        def compute_metrics(self, results):
            return {"label_mean": sum(results) / len(results)}

    evaluator = build_evaluator(dict(type="LabelMeanMetric", prefix="val"))
    for batch, outputs in two_batches():
        evaluator.process(batch, outputs)
    assert evaluator.evaluate(4) == {"val/label_mean": 0.5}
