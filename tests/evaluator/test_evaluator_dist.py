"""Two ranks forked from the test (gloo on CPU): both get the same metrics as one process would."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from libai.evaluator import BaseMetric, Evaluator
from libai.utils import dist as dist_utils

SIZE = 23  # odd: the sampler pads it to 24 for two ranks
WORLD_SIZE = 2
BATCH_SIZE = 4


class OrderMetric(BaseMetric):
    """1.0 when the gathered results are exactly the dataset indices, in order."""

    def process(self, batch, outputs):
        self.results.extend(batch["index"].tolist())

    def compute_metrics(self, results):
        return {"in_order": float(results == list(range(SIZE)))}


def make_dataset():
    g = torch.Generator().manual_seed(123)
    return {
        "index": torch.arange(SIZE),
        "logits": torch.randn(SIZE, 5, generator=g),
        "labels": torch.randint(0, 5, (SIZE,), generator=g),
        "binary": torch.randint(0, 2, (SIZE,), generator=g),
        "scores": torch.rand(SIZE, generator=g),
    }


def make_evaluator():
    return Evaluator(
        [
            dict(type="Accuracy", topk=(1, 3)),
            dict(type="AUC", label_key="binary"),
            OrderMetric(),
        ]
    )


def run_evaluator(data, indices):
    evaluator = make_evaluator()
    for i in range(0, len(indices), BATCH_SIZE):
        idx = torch.tensor(indices[i : i + BATCH_SIZE])
        batch = {"index": idx, "labels": data["labels"][idx], "binary": data["binary"][idx]}
        outputs = {"logits": data["logits"][idx], "scores": data["scores"][idx]}
        evaluator.process(batch, outputs)
    return evaluator.evaluate(SIZE)


def worker():
    """A rank forked by spawn_ranks (gloo, torchrun's environment): its metrics."""
    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        assert dist_utils.get_world_size() == WORLD_SIZE
        indices = list(range(SIZE))
        indices += indices[: (-SIZE) % WORLD_SIZE]  # the sampler's padding
        return run_evaluator(make_dataset(), indices[rank::WORLD_SIZE])
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_agree_with_single_process(spawn_ranks):
    got = [r.value for r in spawn_ranks(WORLD_SIZE, worker, timeout=120).check().ranks]
    expected = run_evaluator(make_dataset(), list(range(SIZE)))

    assert got[0] == got[1]
    assert got[0]["in_order"] == 1.0 and expected["in_order"] == 1.0
    assert set(got[0]) == set(expected)
    for key, value in expected.items():
        assert math.isclose(got[0][key], value, rel_tol=1e-12), key
