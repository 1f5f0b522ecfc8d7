"""Fine-tuning metrics against their references: scikit-learn, scipy.stats and seqeval."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from libai.evaluator import BaseMetric, Evaluator
from libai.evaluator.metrics import (
    ClassificationReport,
    Correlation,
    EntityF1,
    F1Score,
    MatthewsCorrCoef,
    Precision,
    Recall,
    TagScheme,
    extract_entities,
)
from libai.registry import METRICS
from libai.utils.errors import ConfigError, DataError

skm = pytest.importorskip("sklearn.metrics")
stats = pytest.importorskip("scipy.stats")


def run(metric, batch, outputs, size=7):
    """Feed the samples in batches of ``size`` and evaluate them all."""
    n = len(next(iter(batch.values())))
    for i in range(0, n, size):
        metric.process({k: v[i : i + size] for k, v in batch.items()},
                       {k: v[i : i + size] for k, v in outputs.items()})
    return metric.evaluate(n)


def one_shot(metric, batch, outputs):
    metric.process(batch, outputs)
    return metric.evaluate(len(next(iter(batch.values()))))


def assert_close(got, expected):
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-12, nan_ok=True), key


# ------------------------------------------------------------------ single-label classification
def random_case(seed, n=60, c=5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, c, generator=g)
    labels = torch.randint(0, c - 1, (n,), generator=g)  # class c-1 never a label
    return logits, labels


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_classification_matches_sklearn(seed):
    logits, labels = random_case(seed)
    y, p = labels.numpy(), logits.argmax(1).numpy()
    report = ClassificationReport(average=("macro", "micro", "weighted"), per_class=True)
    got = run(report, {"labels": labels}, {"logits": logits})
    for name, fn in (("precision", skm.precision_score), ("recall", skm.recall_score),
                     ("f1", skm.f1_score)):
        for avg in ("macro", "micro", "weighted"):  # sklearn's defaults, as HF evaluate
            assert got[f"{name}/{avg}"] == pytest.approx(
                fn(y, p, average=avg, zero_division=0.0)), (name, avg)
        per = fn(y, p, labels=range(5), average=None, zero_division=0.0)
        assert [got[f"{name}/{i}"] for i in range(5)] == pytest.approx(per)
    assert got["mcc"] == pytest.approx(skm.matthews_corrcoef(y, p))
    # one metric per value, batch by batch, equals one shot of the report
    for cls, key in ((F1Score, "f1"), (Precision, "precision"), (Recall, "recall")):
        assert one_shot(cls(average="weighted"), {"labels": labels}, {"logits": logits}) == {
            key: pytest.approx(got[f"{key}/weighted"])}
    assert one_shot(MatthewsCorrCoef(), {"labels": labels}, {"logits": logits}) == {
        "mcc": pytest.approx(got["mcc"])}


def test_absent_class_zero_division_and_class_names():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    ids = torch.tensor([0, 1, 1, 1, 2, 0])  # class 3: neither true nor predicted
    names = ("drama", "comedy", "horror", "western")
    metric = F1Score(per_class=True, classes=names)
    got = one_shot(metric, {"labels": labels}, {"logits": ids})
    f1 = skm.f1_score(labels, ids, labels=range(3), average=None)
    assert got["f1/western"] == 0.0  # zero_division
    assert got["f1"] == pytest.approx(f1.mean())  # the absent class is not averaged in
    assert [got[f"f1/{n}"] for n in names[:3]] == pytest.approx(f1)
    got = one_shot(F1Score(per_class=True, classes=names, zero_division=1.0),
                   {"labels": labels}, {"logits": ids})
    assert got["f1/western"] == 1.0
    got = one_shot(Precision(per_class=True, zero_division="nan"), {"labels": labels},
                   {"logits": torch.tensor([0, 0, 0, 0, 0, 0])})
    assert math.isnan(got["precision/1"]) and got["precision/0"] == pytest.approx(2 / 6)
    assert got["precision"] == pytest.approx(2 / 6)  # nan is left out of the average


def test_binary_average_and_names_from_dataset_meta():
    g = torch.Generator().manual_seed(5)
    logits, labels = torch.randn(40, 2, generator=g), torch.randint(0, 2, (40,), generator=g)
    evaluator = Evaluator([dict(type="F1Score", average=("binary", "macro"), per_class=True),
                           dict(type="MatthewsCorrCoef")])
    evaluator.dataset_meta = {"classes": ("neg", "pos"), "task": "sst2"}
    assert all(m.dataset_meta["classes"] == ("neg", "pos") for m in evaluator.metrics)
    evaluator.process({"labels": labels}, {"logits": logits})
    got = evaluator.evaluate(40)
    p = logits.argmax(1)
    assert set(got) == {"f1/binary", "f1/macro", "f1/neg", "f1/pos", "mcc"}
    assert got["f1/binary"] == pytest.approx(skm.f1_score(labels, p))
    assert got["f1/pos"] == got["f1/binary"]
    with pytest.raises(ConfigError, match="binary"):
        one_shot(F1Score(average="binary"), {"labels": torch.tensor([0, 2])},
                 {"logits": torch.randn(2, 3)})


# ------------------------------------------------------------------ multi-label classification
@pytest.mark.parametrize("seed", [0, 1])
def test_multi_label_matches_sklearn(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(50, 6, generator=g)
    labels = (torch.rand(50, 6, generator=g) < 0.3).float()
    labels[:, 5] = 0  # a column with no positive
    avgs = ("macro", "micro", "weighted", "samples")
    got = run(ClassificationReport(average=avgs, per_class=True), {"labels": labels},
              {"logits": logits})
    y, p = labels.numpy().astype(int), (logits > 0).numpy().astype(int)  # sigmoid > 0.5
    for avg in avgs:
        assert got[f"f1/{avg}"] == pytest.approx(skm.f1_score(y, p, average=avg,
                                                              zero_division=0.0))
    assert [got[f"recall/{i}"] for i in range(6)] == pytest.approx(
        skm.recall_score(y, p, average=None, zero_division=0.0))
    assert got["mcc"] == pytest.approx(skm.matthews_corrcoef(y.ravel(), p.ravel()))
    # probabilities with threshold 0.5 decide the same
    probs = run(ClassificationReport(average=avgs, per_class=True, threshold=0.5),
                {"labels": labels}, {"logits": torch.sigmoid(logits)})
    assert_close(probs, got)


def test_empty_input_is_nan_with_a_warning():
    for metric in (ClassificationReport(classes=("a", "b")), Correlation(),
                   EntityF1(classes=("O", "B-X", "I-X"))):
        with pytest.warns(RuntimeWarning, match="no samples"):
            got = metric.evaluate(0)
        assert got and all(math.isnan(v) for v in got.values()), metric.name


def test_classification_errors_are_readable():
    with pytest.raises(ConfigError, match="average must be one of"):
        F1Score(average="macr")
    with pytest.raises(ConfigError, match="zero_division"):
        F1Score(zero_division=0.5)
    with pytest.raises(ConfigError, match="items"):
        ClassificationReport(items=("f1", "auc"))
    with pytest.raises(DataError, match="3 predictions, 4 labels"):
        F1Score().process({"labels": torch.zeros(4)}, torch.randn(3, 2))
    with pytest.raises(DataError, match="integer class ids"):
        F1Score().process({"labels": torch.zeros(4)}, torch.randn(4))
    with pytest.raises(DataError, match="one score per sample"):
        F1Score().process({"labels": torch.zeros(4)}, torch.randn(4, 1))
    with pytest.raises(DataError, match="differ in shape"):
        F1Score().process({"labels": torch.zeros(4, 3)}, torch.randn(4, 2))
    with pytest.raises(DataError, match="must be 0 or 1"):
        F1Score().process({"labels": torch.full((2, 3), 2.0)}, torch.randn(2, 3))
    with pytest.raises(DataError, match="3 classes but 2 class names"):
        one_shot(F1Score(classes=("a", "b")), {"labels": torch.tensor([0])},
                 {"logits": torch.randn(1, 3)})
    with pytest.raises(DataError, match="class id 4 occurs"):
        one_shot(F1Score(), {"labels": torch.tensor([4])}, {"logits": torch.randn(1, 3)})
    with pytest.raises(ConfigError, match="dataset_meta must be a dict"):
        F1Score().dataset_meta = ("a", "b")


# ------------------------------------------------------------------ correlation
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correlation_matches_scipy_with_ties(seed):
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, 6, (45,), generator=g).float()  # STS-B-like 0..5, many ties
    pred = (target + torch.randn(45, generator=g)).round().unsqueeze(1)  # (N, 1), ties too
    got = run(Correlation(), {"labels": target}, {"logits": pred})
    assert got["pearson"] == pytest.approx(stats.pearsonr(pred[:, 0], target)[0])
    assert got["spearman"] == pytest.approx(stats.spearmanr(pred[:, 0], target)[0])
    assert one_shot(Correlation("spearman"), {"labels": target}, {"logits": pred}) == {
        "spearman": pytest.approx(got["spearman"])}


def test_correlation_undefined_and_bad_shapes():
    with pytest.warns(RuntimeWarning, match="predictions are equal"):
        got = one_shot(Correlation(), {"labels": torch.arange(4.0)}, {"logits": torch.ones(4)})
    assert math.isnan(got["pearson"]) and math.isnan(got["spearman"])
    with pytest.raises(DataError, match=r"\(N,\) or \(N, 1\)"):
        Correlation().process({"labels": torch.zeros(3)}, torch.zeros(3, 2))
    with pytest.raises(DataError, match="3 predictions"):
        Correlation().process({"labels": torch.zeros(4)}, torch.zeros(3))
    with pytest.raises(ConfigError, match="methods"):
        Correlation(methods=("kendall",))


# ------------------------------------------------------------------ entities
IOB2 = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
IOBES = ("O", "B-PER", "I-PER", "E-PER", "S-PER", "B-ORG", "I-ORG", "E-ORG", "S-ORG", "S-DATE")


def test_extract_entities_by_hand():
    scheme = TagScheme(IOB2)
    tags = ["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-PER", "O"]
    ids = np.array([IOB2.index(t) for t in tags])
    type_, first, last = extract_entities(scheme.kinds[ids], scheme.types[ids])
    names = [scheme.type_names[t] for t in type_]
    # I-LOC after O opens a chunk; I-PER after I... of LOC closes it and opens another
    assert list(zip(names, first, last)) == [("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 4),
                                             ("PER", 5, 5)]


def random_tags(seed, tags, n=40, t=12):
    """Random tag ids (invalid transitions included) with -100 at a random first position
    (a [CLS]), some word-piece continuations, and padding at the end of shorter rows."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(tags), (n, t))
    weights = np.where(np.array(tags) == "O", 4.0, 1.0)
    pred = rng.choice(len(tags), (n, t), p=weights / weights.sum())
    labels[rng.random((n, t)) < 0.15] = -100
    labels[:, 0] = -100
    for row, length in enumerate(rng.integers(1, t + 1, n)):
        labels[row, length:] = -100
    return torch.from_numpy(labels), torch.from_numpy(pred)


def seqeval_reference(labels, pred, tags, zero_division=0):
    seqeval = pytest.importorskip("seqeval.metrics")
    keep = (labels != -100).numpy()
    y = [[tags[i] for i in row[k]] for row, k in zip(labels.numpy(), keep)]
    p = [[tags[i] for i in row[k]] for row, k in zip(pred.numpy(), keep)]
    report = seqeval.classification_report(y, p, output_dict=True, zero_division=zero_division)
    expected = {
        "precision": seqeval.precision_score(y, p, zero_division=zero_division),
        "recall": seqeval.recall_score(y, p, zero_division=zero_division),
        "f1": seqeval.f1_score(y, p, zero_division=zero_division),
        "accuracy": seqeval.accuracy_score(y, p),
    }
    per_type = {k: v["f1-score"] for k, v in report.items() if not k.endswith("avg")}
    return expected, per_type


@pytest.mark.parametrize("tags", [IOB2, IOBES], ids=["IOB2", "IOBES"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_entity_f1_matches_seqeval(tags, seed):
    labels, pred = random_tags(seed, tags)
    expected, per_type = seqeval_reference(labels, pred, tags)
    got = run(EntityF1(classes=tags), {"labels": labels}, {"logits": pred})
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key
    types = TagScheme(tags).type_names
    assert [k for k in got if k.startswith("f1/")] == [f"f1/{t}" for t in types]
    for t in types:  # a type absent from both is zero_division, seqeval does not list it
        assert got[f"f1/{t}"] == pytest.approx(per_type.get(t, 0.0)), t
    # logits (N, T, C) give the same as their argmax; one shot the same as batches
    logits = torch.nn.functional.one_hot(pred, len(tags)).float() + 0.01 * torch.rand(
        *pred.shape, len(tags))
    assert_close(one_shot(EntityF1(classes=tags), {"labels": labels}, {"logits": logits}), got)


def test_bilou_reads_as_iobes_and_zero_division():
    bilou = tuple(t.replace("E-", "L-").replace("S-", "U-") for t in IOBES)
    labels, pred = random_tags(7, bilou)
    expected, _ = seqeval_reference(labels, pred, IOBES)
    got = one_shot(EntityF1(classes=bilou, per_type=False), {"labels": labels}, {"logits": pred})
    assert_close(got, expected)
    # no entity predicted at all: precision is zero_division, as in seqeval
    none = torch.zeros_like(pred)
    for zd in (0, 1):
        expected, _ = seqeval_reference(labels, none, IOBES, zero_division=zd)
        got = one_shot(EntityF1(classes=IOBES, per_type=False, zero_division=zd),
                       {"labels": labels}, {"logits": none})
        assert_close(got, expected)


def test_entity_names_from_dataset_meta_and_errors():
    metric = METRICS.build(dict(type="EntityF1"))
    with pytest.raises(ConfigError, match="needs the class names"):
        metric.process({"labels": torch.zeros(1, 3, dtype=torch.long)},
                       {"logits": torch.zeros(1, 3, dtype=torch.long)})
    with pytest.raises(ConfigError, match="BIO-style tags.*'PER'"):
        metric.dataset_meta = {"classes": ("O", "PER", "LOC")}  # checked when handed over
    for bad in (("O", "X-LOC"), ("O", "PER-B"), ("O",)):
        with pytest.raises(ConfigError, match="BIO-style"):
            EntityF1(classes=bad)
    metric.dataset_meta = {"classes": IOB2}
    with pytest.raises(DataError, match="score 5 tags, but there are 7"):
        metric.process({"labels": torch.zeros(1, 3, dtype=torch.long)},
                       {"logits": torch.zeros(1, 3, 5)})
    with pytest.raises(DataError, match="label tag id 9"):
        metric.process({"labels": torch.tensor([[0, 9, -100]])},
                       {"logits": torch.zeros(1, 3, dtype=torch.long)})
    with pytest.raises(DataError, match="labels of shape"):
        metric.process({"labels": torch.zeros(2, 3, dtype=torch.long)},
                       {"logits": torch.zeros(2, 4, dtype=torch.long)})
    assert BaseMetric.dataset_meta.fget(F1Score()) is None


def test_evaluator_hands_dataset_meta_to_metrics():
    evaluator = Evaluator([dict(type="EntityF1"), dict(type="Accuracy")])
    assert evaluator.dataset_meta is None and evaluator.metrics[0].dataset_meta is None
    with pytest.raises(ConfigError, match="BIO-style"):  # checked when the runner sets it
        evaluator.dataset_meta = {"classes": ("neg", "pos")}
    evaluator.dataset_meta = {"classes": IOB2}
    assert [m.dataset_meta for m in evaluator.metrics] == [{"classes": IOB2}] * 2
    with pytest.raises(ConfigError, match="must be a dict"):
        evaluator.dataset_meta = IOB2


def test_references_are_imported_lazily():
    """No module of libai.evaluator imports scikit-learn, scipy or seqeval at import time
    (``import sklearn.metrics`` alone takes seconds): only inside functions."""
    import ast
    import pathlib

    import libai.evaluator

    root = pathlib.Path(libai.evaluator.__file__).parent
    for path in root.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:  # top-level statements only
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] not in ("sklearn", "scipy", "seqeval"), (path, name)
