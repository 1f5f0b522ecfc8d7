"""Built-in metrics against scikit-learn (a test-only reference) or hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from libai.evaluator import (
    AUC,
    GAUC,
    Accuracy,
    MeanSquaredError,
    Perplexity,
    TokenAccuracy,
    binary_auc,
)
from libai.utils.errors import ConfigError, DataError

sklearn_metrics = pytest.importorskip("sklearn.metrics")


def run(metric, batches):
    """Feed (batch, outputs) pairs to ``metric`` and evaluate on all samples."""
    n = 0
    for batch, outputs in batches:
        before = len(metric.results)
        metric.process(batch, outputs)
        n += len(metric.results) - before
    return metric.evaluate(n)


def split(n, size):
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


# ---------------------------------------------------------------------------------- Accuracy
def test_accuracy_top1_and_topk_match_sklearn():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(97, 7, generator=g)
    labels = torch.randint(0, 7, (97,), generator=g)
    batches = [({"labels": labels[s]}, {"logits": logits[s]}) for s in split(97, 16)]

    res = run(Accuracy(topk=(1, 3, 5)), batches)
    assert set(res) == {"accuracy/top1", "accuracy/top3", "accuracy/top5"}
    y, scores = labels.numpy(), logits.numpy()
    assert res["accuracy/top1"] == pytest.approx(
        sklearn_metrics.accuracy_score(y, scores.argmax(1))
    )
    for k in (3, 5):
        expected = sklearn_metrics.top_k_accuracy_score(y, scores, k=k, labels=np.arange(7))
        assert res[f"accuracy/top{k}"] == pytest.approx(expected)
    assert 0.0 <= res["accuracy/top1"] <= 1.0  # a fraction, not a percentage


def test_accuracy_single_k_key_tensor_outputs_and_class_indices():
    logits = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    labels = torch.tensor([1, 1, 1, 0])
    # the model returns a plain tensor: it is the prediction
    assert run(Accuracy(), [({"labels": labels}, logits)]) == {"accuracy": 0.75}
    # predicted class indices of shape (N,)
    assert run(Accuracy(), [({"labels": labels}, {"logits": logits.argmax(1)})]) == {
        "accuracy": 0.75
    }


def test_accuracy_rejects_bad_topk_and_shapes():
    with pytest.raises(ConfigError, match="topk"):
        Accuracy(topk=(0,))
    with pytest.raises(ConfigError, match="only 3 classes"):
        Accuracy(topk=(1, 5)).process({"labels": torch.zeros(2)}, torch.randn(2, 3))
    with pytest.raises(DataError, match="4 labels"):
        Accuracy().process({"labels": torch.zeros(4)}, torch.randn(2, 3))


# ------------------------------------------------------------------------------------ AUC
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_matches_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    n = 301
    labels = rng.integers(0, 2, n)
    scores = rng.integers(0, 6, n) / 5.0 + 0.3 * labels * rng.integers(0, 2, n)  # many ties
    batches = [
        ({"labels": torch.from_numpy(labels[s])}, {"scores": torch.from_numpy(scores[s])})
        for s in split(n, 32)
    ]
    res = run(AUC(), batches)
    assert res["auc"] == pytest.approx(sklearn_metrics.roc_auc_score(labels, scores), abs=1e-12)
    assert binary_auc(scores, labels) == pytest.approx(res["auc"], abs=1e-12)


def test_auc_two_column_logits_and_probabilities():
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(200, 2, generator=g)
    labels = torch.randint(0, 2, (200,), generator=g)
    expected = sklearn_metrics.roc_auc_score(labels.numpy(), logits.softmax(1)[:, 1].numpy())
    for pred in (logits, logits.softmax(1)):
        res = run(AUC(pred_key="logits"), [({"labels": labels}, {"logits": pred})])
        assert res["auc"] == pytest.approx(expected, abs=1e-9)


def test_auc_single_class_is_nan_with_warning():
    metric = AUC()
    metric.process({"labels": torch.ones(5)}, {"scores": torch.rand(5)})
    with pytest.warns(RuntimeWarning, match="both classes"):
        res = metric.evaluate(5)
    assert math.isnan(res["auc"])


def test_auc_rejects_non_binary_labels():
    with pytest.raises(DataError, match="0 or 1"):
        AUC().process({"labels": torch.tensor([0, 2])}, {"scores": torch.rand(2)})


# ----------------------------------------------------------------------------------- GAUC
def test_gauc_weighting_by_hand():
    # group 7: the positive outranks both negatives -> AUC 1.0, 3 samples
    # group 8: positives {0.2, 0.3} vs negatives {0.8, 0.3}: one tie of four pairs -> 0.125
    # group 9: only positives -> skipped
    scores = [0.9, 0.1, 0.5, 0.2, 0.8, 0.3, 0.3, 0.6, 0.4]
    labels = [1, 0, 0, 1, 0, 1, 0, 1, 1]
    users = [7, 7, 7, 8, 8, 8, 8, 9, 9]
    batch = {"labels": torch.tensor(labels), "user_id": torch.tensor(users)}
    res = run(GAUC(), [(batch, {"scores": torch.tensor(scores)})])
    assert res["gauc"] == pytest.approx((3 * 1.0 + 4 * 0.125) / 7)
    assert res["gauc/num_groups"] == 2


def test_gauc_random_matches_per_group_sklearn_and_string_groups():
    rng = np.random.default_rng(5)
    n = 400
    groups = rng.integers(0, 25, n)
    labels = rng.integers(0, 2, n)
    scores = np.round(rng.random(n), 1)  # ties inside groups
    names = np.array([f"u{g}" for g in groups])
    batches = [
        (
            {"labels": torch.from_numpy(labels[s]), "uid": names[s].tolist()},
            {"scores": torch.from_numpy(scores[s])},
        )
        for s in split(n, 64)
    ]
    res = run(GAUC(group_key="uid"), batches)

    num = den = used = 0
    for g in np.unique(groups):
        m = groups == g
        if len(np.unique(labels[m])) == 2:
            num += m.sum() * sklearn_metrics.roc_auc_score(labels[m], scores[m])
            den += m.sum()
            used += 1
    assert res["gauc"] == pytest.approx(num / den, abs=1e-12)
    assert res["gauc/num_groups"] == used


def test_gauc_group_key_may_come_from_outputs():
    outputs = {"scores": torch.tensor([0.1, 0.9]), "user_id": torch.tensor([1, 1])}
    res = run(GAUC(), [({"labels": torch.tensor([0, 1])}, outputs)])
    assert res == {"gauc": 1.0, "gauc/num_groups": 1.0}


# ------------------------------------------------------------------------------------ MSE
@pytest.mark.parametrize("shape", [(53,), (53, 3)])
def test_mse_matches_sklearn(shape):
    g = torch.Generator().manual_seed(7)
    pred, target = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    batches = [({"labels": target[s]}, {"preds": pred[s]}) for s in split(53, 10)]
    res = run(MeanSquaredError(), batches)
    expected = sklearn_metrics.mean_squared_error(target.numpy(), pred.numpy())
    assert res["mse"] == pytest.approx(expected, rel=1e-6)
    assert res["rmse"] == pytest.approx(math.sqrt(expected), rel=1e-6)


def test_mse_column_prediction_does_not_broadcast():
    pred = torch.tensor([[1.0], [2.0], [3.0]])
    res = run(MeanSquaredError(), [({"labels": torch.tensor([1.0, 2.0, 5.0])}, pred)])
    assert res["mse"] == pytest.approx(4.0 / 3)
    with pytest.raises(DataError, match="per sample"):
        MeanSquaredError().process({"labels": torch.zeros(3, 2)}, torch.zeros(3, 3))


# ----------------------------------------------------------------------------- Perplexity
def test_perplexity_matches_cross_entropy_with_ignore_index():
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(6, 9, 13, generator=g)
    labels = torch.randint(0, 13, (6, 9), generator=g)
    labels[0, :4] = -100
    labels[3, 5:] = -100
    batches = [({"labels": labels[s]}, {"logits": logits[s]}) for s in split(6, 4)]
    res = run(Perplexity(), batches)
    mean_nll = F.cross_entropy(logits.reshape(-1, 13), labels.reshape(-1), ignore_index=-100)
    assert res["perplexity"] == pytest.approx(math.exp(mean_nll.item()), rel=1e-5)


def test_perplexity_from_model_sums_and_bfloat16_logits():
    g = torch.Generator().manual_seed(12)
    logits = torch.randn(4, 5, 8, generator=g)
    labels = torch.randint(0, 8, (4, 5), generator=g)
    nll = F.cross_entropy(logits.reshape(-1, 8), labels.reshape(-1), reduction="none")
    outputs = {"nll_sum": nll.reshape(4, 5).sum(1), "num_tokens": torch.full((4,), 5)}
    res = run(Perplexity(), [({"labels": labels}, outputs)])
    assert res["perplexity"] == pytest.approx(math.exp(nll.mean().item()), rel=1e-5)
    res16 = run(Perplexity(), [({"labels": labels}, {"logits": logits.bfloat16()})])
    assert res16["perplexity"] == pytest.approx(res["perplexity"], rel=5e-2)


def test_perplexity_rejects_wrong_shapes():
    with pytest.raises(DataError, match=r"\(B, T, V\)"):
        Perplexity().process({"labels": torch.zeros(2, 3)}, {"logits": torch.zeros(2, 5)})


# -------------------------------------------------------------------------- TokenAccuracy
def test_token_accuracy_counts_only_target_positions():
    g = torch.Generator().manual_seed(13)
    logits = torch.randn(5, 7, 11, generator=g)
    labels = torch.randint(0, 11, (5, 7), generator=g)
    labels[:, :3] = logits[:, :3].argmax(-1)  # three hits per row at least
    labels[1, 4:] = -100
    labels[2, :] = -100  # a sequence without targets adds nothing
    batches = [({"labels": labels[s]}, {"logits": logits[s]}) for s in split(5, 3)]
    res = run(TokenAccuracy(prefix="mlm"), batches)
    valid = labels != -100
    expected = ((logits.argmax(-1) == labels) & valid).sum().item() / valid.sum().item()
    assert res == {"mlm/accuracy": pytest.approx(expected)}


def test_token_accuracy_from_model_counts_equals_from_logits():
    g = torch.Generator().manual_seed(14)
    logits = torch.randn(4, 6, 9, generator=g)
    labels = torch.randint(0, 9, (4, 6), generator=g)
    labels[0, 2:] = -100
    valid = labels != -100
    counts = {
        "num_correct": ((logits.argmax(-1) == labels) & valid).sum(1),
        "num_tokens": valid.sum(1),
    }
    from_counts = run(TokenAccuracy(), [({}, counts)])
    from_logits = run(TokenAccuracy(), [({"labels": labels}, {"logits": logits})])
    assert from_counts == from_logits


def test_token_accuracy_exact_match_is_greedy_decoding_writing_the_response():
    from libai.model import GPTForCausalLM

    torch.manual_seed(0)
    model = GPTForCausalLM(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4,
                           max_position_embeddings=32).eval()
    prompts = torch.randint(0, 50, (4, 5))
    with torch.no_grad():
        greedy = model.generate(prompts, 4)  # (4, 9): prompt + 4 greedy tokens
    tokens = greedy.clone()
    tokens[1, -1] = (tokens[1, -1] + 1) % 50  # the last response token is not the greedy one
    tokens[2, 6] = (tokens[2, 6] + 1) % 50  # nor the second (what follows is then off the path)
    labels = tokens[:, 1:].clone()
    labels[:, :4] = -100  # the loss and the metric on the response only
    labels[3, :] = -100  # a row without a response counts for nothing
    with torch.no_grad():
        outputs = model({"input_ids": tokens[:, :-1], "labels": labels})
    metric = TokenAccuracy(exact_match=True)
    res = run(metric, [({"labels": labels}, outputs)])
    assert res["exact_match"] == pytest.approx(1 / 3)  # row 0 only, of rows 0-2
    with torch.no_grad():
        logits = model({"input_ids": tokens[:, :-1]})["logits"]
    assert res == run(TokenAccuracy(exact_match=True), [({"labels": labels}, {"logits": logits})])
    assert "exact_match" not in run(TokenAccuracy(), [({"labels": labels}, outputs)])
    with pytest.raises(ConfigError, match="exact_match='yes'"):
        TokenAccuracy(exact_match="yes")


def test_token_accuracy_bad_input():
    with pytest.raises(DataError, match=r"\(B, T, V\)"):
        TokenAccuracy().process({"labels": torch.zeros(2, 3)}, {"logits": torch.zeros(2, 5)})
    with pytest.raises(DataError, match="one per sequence"):
        TokenAccuracy().process({}, {"num_correct": torch.zeros(2), "num_tokens": torch.ones(3)})
    with pytest.warns(RuntimeWarning, match="no target tokens"):
        assert math.isnan(run(TokenAccuracy(), [({}, {"num_correct": torch.zeros(2),
                                                      "num_tokens": torch.zeros(2)})])["accuracy"])
