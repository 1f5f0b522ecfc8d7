"""F1, precision, recall and Matthews correlation for single-label and multi-label classification.

``process`` keeps one small record per sample (the predicted and the true class, or the two 0/1
rows of a multi-label sample); ``compute_metrics`` hands the whole set to scikit-learn, imported
there and not before: ``import sklearn.metrics`` takes about 2.5 s cold, which no ``import
libai`` should pay. Averages are scikit-learn's with its default label set, as Hugging Face
``evaluate`` reports them: for single-label data, the classes that occur in the labels or the
predictions (a class the evaluation set never mentions does not pull the macro average down);
for multi-label data, every column.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from libai.registry import METRICS
from libai.utils.errors import ConfigError, DataError

from ..base_metric import BaseMetric, nan_with_warning, to_numpy
from ._names import check_choices, check_zero_division, resolve_classes

__all__ = [
    "ClassificationReport",
    "F1Score",
    "MatthewsCorrCoef",
    "Precision",
    "Recall",
]

AVERAGES = ("macro", "micro", "weighted", "binary", "samples")
ITEMS = ("precision", "recall", "f1", "mcc")


def _sklearn_available(owner: str) -> None:
    if importlib.util.find_spec("sklearn") is None:
        raise ConfigError(
            f"{owner} computes its values with scikit-learn, which is not installed: run "
            f"`pip install scikit-learn` (it is in requirements/optional.txt)."
        )


class _ClassificationMetric(BaseMetric):
    """What F1Score, Precision, Recall, MatthewsCorrCoef and ClassificationReport share."""

    items: tuple[str, ...] = ()

    def __init__(
        self,
        average: str | Sequence[str] = "macro",
        per_class: bool = False,
        classes: Sequence[str] | None = None,
        threshold: float = 0.0,
        zero_division: float | str = 0.0,
        pred_key: str = "logits",
        label_key: str = "labels",
        prefix: str | None = None,
    ) -> None:
        super().__init__(prefix=prefix)
        _sklearn_available(self.name)
        self.averages = check_choices(
            average, AVERAGES, f"{self.name}: average must be one of {AVERAGES} or a list of "
            f"distinct ones"
        )
        self.per_class = bool(per_class)
        self.classes = None if classes is None else resolve_classes(self.name, classes, None, True)
        self.threshold = float(threshold)
        self.zero_division = check_zero_division(self.name, zero_division)
        self.pred_key = pred_key
        self.label_key = label_key

    # ------------------------------------------------------------------ per batch
    def process(self, batch: Any, outputs: Any) -> None:
        pred = torch.as_tensor(self.fetch_pred(self.pred_key, batch, outputs))
        label = to_numpy(self.fetch(self.label_key, batch, outputs, arg="label_key"))
        if label.ndim == 2 and label.shape[1] > 1:
            self.results.extend(self._multi_label(pred, label))
        else:
            self.results.extend(self._single_label(pred, label))

    def _shape_error(self, pred: Any, label: np.ndarray, why: str) -> DataError:
        return DataError(
            f"{self.name}: {why} Got a prediction of shape {tuple(pred.shape)} (key "
            f"'{self.pred_key}') and labels of shape {tuple(label.shape)} (key "
            f"'{self.label_key}'). Expected scores (N, C) or class ids (N,) with labels (N,), "
            f"or multi-label scores (N, C) with 0/1 labels (N, C)."
        )

    def _single_label(self, pred: torch.Tensor, label: np.ndarray) -> list[tuple[int, int, int]]:
        label = label.reshape(-1)
        if pred.dim() == 2 and pred.shape[1] == 1 and not pred.is_floating_point():
            pred = pred.reshape(-1)
        if pred.dim() == 2 and pred.shape[1] == 1:
            raise self._shape_error(pred, label, "one score per sample names no class: return "
                                    "a score per class (N, C), or class ids such as "
                                    "(logit > 0).long().")
        if pred.dim() == 2:  # scores (N, C)
            width, ids = pred.shape[1], to_numpy(pred.argmax(dim=1))
        elif pred.dim() == 1 and not pred.is_floating_point():
            width, ids = -1, to_numpy(pred)  # class ids: the width is unknown
        else:
            raise self._shape_error(pred, label, "the prediction is neither scores (N, C) nor "
                                    "integer class ids (N,).")
        if ids.shape[0] != label.shape[0]:
            raise self._shape_error(pred, label, f"{ids.shape[0]} predictions, "
                                                 f"{label.shape[0]} labels.")
        if label.size and (np.any(label != np.round(label)) or label.min() < 0):
            raise DataError(f"{self.name}: labels must be class ids >= 0, found "
                            f"{np.unique(label[(label != np.round(label)) | (label < 0)])[:5]}.")
        if ids.size and ids.min() < 0:
            raise DataError(f"{self.name}: predicted class ids must be >= 0, found {ids.min()}.")
        n = ids.shape[0]
        return list(zip(ids.astype(np.int64).tolist(), label.astype(np.int64).tolist(),
                        [width] * n))

    def _multi_label(self, pred: torch.Tensor, label: np.ndarray) -> list[tuple[tuple, tuple]]:
        if tuple(pred.shape) != label.shape:
            raise self._shape_error(pred, label, "multi-label scores and labels differ in shape.")
        if label.size and not np.isin(label, (0, 1)).all():
            raise DataError(f"{self.name}: multi-label labels must be 0 or 1, found "
                            f"{np.unique(label[~np.isin(label, (0, 1))])[:5].tolist()}.")
        if pred.is_floating_point():
            hits = to_numpy(pred > self.threshold)  # (N, C): positive where score > threshold
        else:
            hits = to_numpy(pred) != 0  # 0/1 decisions already
        hits, label = hits.astype(np.int8), label.astype(np.int8)
        return list(zip(map(tuple, hits.tolist()), map(tuple, label.tolist())))

    # ------------------------------------------------------------------ on rank 0
    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        if not results:
            nan = nan_with_warning(self.name, "no samples")
            return {key: nan for key in self._keys(self._names(None))}
        if all(len(r) == 2 for r in results):
            preds = np.asarray([r[0] for r in results], dtype=np.int64)  # (N, C)
            labels = np.asarray([r[1] for r in results], dtype=np.int64)
            names = self._names(labels.shape[1])
            multi = True
        elif all(len(r) == 3 for r in results):
            arr = np.asarray(results, dtype=np.int64).reshape(-1, 3)
            preds, labels = arr[:, 0], arr[:, 1]
            names = self._names(self._num_classes(arr))
            multi = False
        else:
            raise DataError(f"{self.name}: some batches were multi-label (N, C) and some not.")
        self._check_averages(multi, len(names))
        return self._values(preds, labels, names, multi)

    def _num_classes(self, arr: np.ndarray) -> int:
        """C from the class names, else the scores' width, else the largest id seen."""
        widths = set(arr[:, 2].tolist()) - {-1}  # -1: the batch gave class ids, no width
        if len(widths) > 1:
            raise DataError(f"{self.name}: the prediction's number of classes changed between "
                            f"batches: {sorted(widths)}.")
        seen = int(arr[:, :2].max()) + 1
        names = self.classes_or_meta
        if names is not None and widths and widths != {len(names)}:
            raise DataError(f"{self.name}: the prediction scores {widths.pop()} classes but "
                            f"{len(names)} class names are given ({names}).")
        num = len(names) if names is not None else max(widths, default=seen)
        if seen > num:
            raise DataError(f"{self.name}: class id {seen - 1} occurs, but there are only {num} "
                            f"classes{self._names_hint()}.")
        return num

    @property
    def classes_or_meta(self) -> tuple[str, ...] | None:
        """The class names from ``classes`` or ``dataset_meta["classes"]``, if either has them."""
        return resolve_classes(self.name, self.classes, self.dataset_meta, required=False)

    def _names_hint(self) -> str:
        return f" ({self.classes_or_meta})" if self.classes_or_meta else ""

    def _names(self, num: int | None) -> tuple[str, ...]:
        names = self.classes_or_meta
        if names is not None:
            if num is not None and num != len(names):
                raise DataError(f"{self.name}: the labels have {num} columns but "
                                f"{len(names)} class names are given{self._names_hint()}.")
            return names
        return tuple(str(i) for i in range(num or 0))

    def _check_averages(self, multi: bool, num: int) -> None:
        if "binary" in self.averages and (multi or num > 2):
            raise ConfigError(
                f"{self.name}: average='binary' scores class 1 of a two-class task, but this is "
                f"{'multi-label' if multi else f'a {num}-class task'}; use 'macro', 'micro' or "
                f"'weighted'."
            )
        if "samples" in self.averages and not multi:
            raise ConfigError(f"{self.name}: average='samples' is for multi-label data (labels "
                              f"(N, C)); these labels are class ids (N,).")

    def _keys(self, names: Sequence[str]) -> list[str]:
        keys = []
        for item in self.items:
            if item == "mcc":
                keys.append("mcc")
                continue
            keys += [item if len(self.averages) == 1 else f"{item}/{a}" for a in self.averages]
            if self.per_class:
                keys += [f"{item}/{n}" for n in names]
        if len(set(keys)) != len(keys):
            raise ConfigError(f"{self.name}: a class name equals an average's name ({keys}); "
                              f"report one average, or per_class=False.")
        return keys

    def _values(self, preds: np.ndarray, labels: np.ndarray, names: tuple[str, ...],
                multi: bool) -> dict[str, float]:
        from sklearn import metrics as skm  # lazily: ~2.5 s to import cold

        every = None if multi else np.arange(len(names))  # per class: all of them, in order
        prf: dict[str | None, tuple] = {}  # average -> (precision, recall, f1), each once
        for avg in (*self.averages, *((None,) if self.per_class else ())):
            prf[avg] = skm.precision_recall_fscore_support(
                labels, preds, labels=every if avg is None else None, average=avg,
                zero_division=self.zero_division)[:3]
        values: list[float] = []
        for item in self.items:
            if item == "mcc":
                values.append(self._mcc(skm, preds, labels))
                continue
            which = ITEMS.index(item)
            values += [float(prf[avg][which]) for avg in self.averages]
            if self.per_class:
                values += [float(v) for v in prf[None][which]]
        return dict(zip(self._keys(names), values))

    @staticmethod
    def _mcc(skm: Any, preds: np.ndarray, labels: np.ndarray) -> float:
        # multi-label: one MCC over every (sample, class) decision, as torchmetrics does
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="A single label was found")
            return float(skm.matthews_corrcoef(labels.reshape(-1), preds.reshape(-1)))

    def __repr__(self) -> str:
        return (f"{self.name}(average={self.averages}, per_class={self.per_class}, "
                f"prefix={self.prefix!r}, results={len(self.results)})")


_ARGS = """
    The prediction is scores (N, C) (logits or probabilities; the highest one is the predicted
    class) or class ids (N,), against class ids (N,). Multi-label data are scores (N, C) against
    0/1 labels (N, C): a class is predicted where its score is above ``threshold`` (0.0 suits
    logits: sigmoid(x) > 0.5; use 0.5 for probabilities), or 0/1 integer predictions (N, C).

    Args:
        average: "macro", "micro", "weighted", "binary" (class 1 of two) or "samples"
            (multi-label), or a list of them. Defaults to "macro".
        per_class: Add one value per class, keyed by class name (``f1/comedy``) when the names
            are known, else by index (``f1/3``). Defaults to False.
        classes: Class names, index = class id. Defaults to None: ``dataset_meta["classes"]``.
        threshold: Multi-label decision threshold on the scores. Defaults to 0.0.
        zero_division: The value of a ratio with nothing to divide by (precision of a class
            never predicted, recall of a class never true, both for an absent class): 0.0, 1.0
            or "nan" (left out of averages). Defaults to 0.0, as scikit-learn.
        pred_key: Key of the prediction in the outputs (or batch). Defaults to "logits".
        label_key: Key of the labels, looked up in the outputs, then the batch.
            Defaults to "labels".
        prefix: See :class:`BaseMetric`. Defaults to None.
"""


@METRICS.register_module()
class F1Score(_ClassificationMetric):
    __doc__ = """F1 score: ``{"f1": ...}``; several averages give ``{"f1/macro": ...}``.
""" + _ARGS
    items = ("f1",)


@METRICS.register_module()
class Precision(_ClassificationMetric):
    __doc__ = """Precision: ``{"precision": ...}``; several averages give ``{"precision/micro"}``.
""" + _ARGS
    items = ("precision",)


@METRICS.register_module()
class Recall(_ClassificationMetric):
    __doc__ = """Recall: ``{"recall": ...}``; several averages give ``{"recall/weighted": ...}``.
""" + _ARGS
    items = ("recall",)


@METRICS.register_module()
class MatthewsCorrCoef(_ClassificationMetric):
    """Matthews correlation coefficient (multi-class: Gorodkin's R_K): ``{"mcc": ...}``.

    In [-1, 1], 0 for a constant prediction. Multi-label data give one MCC over all
    (sample, class) decisions. Arguments as :class:`F1Score`; ``average`` and ``per_class`` do
    not apply.
    """

    items = ("mcc",)


@METRICS.register_module()
class ClassificationReport(_ClassificationMetric):
    __doc__ = """Precision, recall, F1 and MCC in one metric (the records are kept once).

    ``items`` picks which; the keys are ``precision``, ``recall``, ``f1`` and ``mcc``, as in
    :class:`F1Score` (``f1/macro``, ``f1/<class>``).
""" + _ARGS.replace("    Args:\n", "    Args:\n        items: Any of \"precision\", "
                    "\"recall\", \"f1\", \"mcc\". Defaults to all four.\n", 1)

    def __init__(self, items: Sequence[str] = ITEMS, **kwargs: Any) -> None:
        self.items = check_choices(
            items, ITEMS, f"ClassificationReport: items must be distinct names among {ITEMS}"
        )
        super().__init__(**kwargs)
