"""Fine-tuning metrics on two ranks forked from the test (gloo on CPU) give what one process
gives."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from libai.evaluator import Evaluator

pytest.importorskip("sklearn")

SIZE = 29  # odd: the sampler pads it to 30 for two ranks
WORLD_SIZE = 2
BATCH_SIZE = 4
TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
GENRES = ("drama", "comedy", "horror")


def make_dataset():
    g = torch.Generator().manual_seed(7)
    tags = torch.randint(0, len(TAGS), (SIZE, 9), generator=g)
    tags[:, 0] = -100  # [CLS]
    tags[torch.rand(SIZE, 9, generator=g) < 0.2] = -100  # word-piece continuations
    return {
        "genre": torch.randint(0, 3, (SIZE,), generator=g),
        "genre_logits": torch.randn(SIZE, 3, generator=g),
        "score": torch.rand(SIZE, generator=g) * 5,
        "score_pred": torch.randn(SIZE, 1, generator=g),
        "tags": tags,
        "tag_logits": torch.randn(SIZE, 9, len(TAGS), generator=g),
    }


def run_evaluator(data, indices):
    evaluator = Evaluator([
        dict(type="ClassificationReport", average=("macro", "micro"), per_class=True,
             pred_key="genre_logits", label_key="genre"),
        dict(type="EntityF1", classes=TAGS, pred_key="tag_logits", label_key="tags"),
        dict(type="Correlation", pred_key="score_pred", label_key="score"),
    ])
    evaluator.dataset_meta = {"classes": GENRES}
    for i in range(0, len(indices), BATCH_SIZE):
        idx = torch.tensor(indices[i : i + BATCH_SIZE])
        evaluator.process({k: v[idx] for k, v in data.items()}, {})
    return evaluator.evaluate(SIZE)


def worker():
    """A rank forked by spawn_ranks (gloo, torchrun's environment): its metrics."""
    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        indices = list(range(SIZE))
        indices += indices[: (-SIZE) % WORLD_SIZE]  # the sampler's padding
        return run_evaluator(make_dataset(), indices[rank::WORLD_SIZE])
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_agree_with_single_process(spawn_ranks):
    got = [r.value for r in spawn_ranks(WORLD_SIZE, worker, timeout=120).check().ranks]
    expected = run_evaluator(make_dataset(), list(range(SIZE)))

    assert got[0] == got[1]
    assert {"f1/drama", "f1/macro", "mcc", "f1/PER", "accuracy", "spearman"} <= set(expected)
    assert set(got[0]) == set(expected)
    for key, value in expected.items():
        assert math.isclose(got[0][key], value, rel_tol=1e-12), key
    assert 0.0 < expected["f1"] < 1.0  # entities found and missed: not a degenerate case
