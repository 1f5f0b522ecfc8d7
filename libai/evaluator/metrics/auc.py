"""Binary ROC AUC, overall (AUC) and averaged over groups such as users (GAUC).

Both use the rank statistic: AUC is the probability that a random positive scores higher than a
random negative, ties counting one half. With the scores ranked 1..n (tied scores sharing the
mean of their ranks), ``AUC = (sum of positive ranks - P (P + 1) / 2) / (P N)`` for P positives
and N negatives. This equals the area under the ROC curve computed with ties as diagonal steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from libai.registry import METRICS
from libai.utils.errors import DataError

from ..base_metric import BaseMetric, nan_with_warning, to_numpy

__all__ = ["AUC", "GAUC", "binary_auc", "grouped_auc"]


def grouped_auc(
    scores: np.ndarray, labels: np.ndarray, groups: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """ROC AUC of every group at once.

    Args:
        scores: (n,) scores, higher meaning more likely positive.
        labels: (n,) labels in {0, 1}.
        groups: (n,) group ids (any sortable values).

    Returns:
        ``(auc, size)``, each of shape (number of groups,), groups in sorted id order. ``auc`` is
        NaN for a group whose samples are all of one class.
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    labels = np.asarray(labels, dtype=np.float64).reshape(-1)
    _, gid = np.unique(np.asarray(groups).reshape(-1), return_inverse=True)
    gid = gid.reshape(-1)
    n = scores.shape[0]
    if n == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    order = np.lexsort((scores, gid))  # by group, then by score
    g, s = gid[order], scores[order]
    size = np.bincount(g)
    group_start = np.concatenate(([0], np.cumsum(size)[:-1]))
    # runs of equal (group, score); every member gets the run's mean rank within its group
    new_run = np.empty(n, dtype=bool)
    new_run[0] = True
    new_run[1:] = (g[1:] != g[:-1]) | (s[1:] != s[:-1])
    run_id = np.cumsum(new_run) - 1
    run_first = np.flatnonzero(new_run)
    run_last = np.append(run_first[1:], n) - 1
    rank_in_group = (run_first + run_last) / 2.0 - group_start[g[run_first]] + 1.0
    ranks = rank_in_group[run_id]

    pos_label = labels[order]
    pos = np.bincount(g, weights=pos_label, minlength=size.shape[0])
    neg = size - pos
    pos_rank_sum = np.bincount(g, weights=ranks * pos_label, minlength=size.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = (pos_rank_sum - pos * (pos + 1) / 2.0) / (pos * neg)
    auc[(pos == 0) | (neg == 0)] = np.nan
    return auc, size


def binary_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC of binary ``labels`` (0/1) ranked by ``scores``; NaN if only one class occurs."""
    auc, _ = grouped_auc(scores, labels, np.zeros(len(scores), dtype=np.int64))
    return float(auc[0]) if auc.size else float("nan")


def _positive_scores(pred: np.ndarray, metric: str, key: str) -> np.ndarray:
    """(N,), (N, 1) or (N, 2) predictions -> (N,) scores ordered like P(label = 1)."""
    if pred.ndim == 2 and pred.shape[1] == 2:
        # column 1 minus column 0 orders samples like softmax(...)[:, 1] for logits, and like
        # column 1 for probabilities (p1 - p0 = 2 p1 - 1)
        return pred[:, 1].astype(np.float64) - pred[:, 0]
    if pred.ndim == 1 or (pred.ndim == 2 and pred.shape[1] == 1):
        return pred.reshape(-1).astype(np.float64)
    raise DataError(
        f"{metric}: expected scores of shape (N,), (N, 1) or (N, 2), got shape {pred.shape} "
        f"(key '{key}')."
    )


def _binary_labels(label: np.ndarray, n: int, metric: str, key: str) -> np.ndarray:
    label = label.reshape(-1)
    if label.shape[0] != n:
        raise DataError(f"{metric}: {n} scores but {label.shape[0]} labels (key '{key}').")
    if label.size and not np.isin(label, (0, 1)).all():
        bad = np.unique(label[~np.isin(label, (0, 1))])[:5].tolist()
        raise DataError(f"{metric}: labels must be 0 or 1, found {bad} (key '{key}').")
    return label.astype(np.int64)


@METRICS.register_module()
class AUC(BaseMetric):
    """Area under the ROC curve for binary labels: ``{"auc": ...}``.

    The prediction is scores of shape (N,) or (N, 1), or two-class logits or probabilities of
    shape (N, 2) (ranked by column 1 minus column 0, which orders samples like the softmax
    probability of class 1). Tied scores count one half. When the evaluated samples hold only
    one class the AUC is undefined: a ``RuntimeWarning`` is issued and the value is NaN, so a
    degenerate validation set does not stop training.

    Args:
        pred_key: Key of the scores in the outputs (or batch); ignored when the model returns a
            tensor. Defaults to "scores".
        label_key: Key of the 0/1 labels, looked up in the outputs, then the batch.
            Defaults to "labels".
        prefix: See :class:`BaseMetric`. Defaults to None.
    """

    def __init__(
        self,
        pred_key: str = "scores",
        label_key: str = "labels",
        prefix: str | None = None,
    ) -> None:
        super().__init__(prefix=prefix)
        self.pred_key = pred_key
        self.label_key = label_key

    def _scores_labels(self, batch: Any, outputs: Any) -> tuple[np.ndarray, np.ndarray]:
        pred = to_numpy(self.fetch_pred(self.pred_key, batch, outputs))
        scores = _positive_scores(pred, self.name, self.pred_key)
        label = to_numpy(self.fetch(self.label_key, batch, outputs, arg="label_key"))
        return scores, _binary_labels(label, scores.shape[0], self.name, self.label_key)

    def process(self, batch: Any, outputs: Any) -> None:
        scores, labels = self._scores_labels(batch, outputs)
        self.results.extend(zip(scores.tolist(), labels.tolist()))

    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        arr = np.asarray(results, dtype=np.float64).reshape(-1, 2)
        auc = binary_auc(arr[:, 0], arr[:, 1])
        if np.isnan(auc):
            auc = nan_with_warning("AUC", f"the {len(arr)} samples do not hold both classes")
        return {"auc": auc}


@METRICS.register_module()
class GAUC(AUC):
    """Group AUC: the AUC of each group (e.g. each user), averaged with group sizes as weights.

    ``GAUC = sum_g n_g AUC_g / sum_g n_g`` over the groups that hold both classes; groups with a
    single class have no AUC and are left out (of the numerator and of the weights). Reports
    ``{"gauc": ..., "gauc/num_groups": number of groups used}``. If no group holds both classes,
    ``gauc`` is NaN with a ``RuntimeWarning``.

    Args:
        group_key: Key of the group ids (ints or strings), looked up in the outputs, then the
            batch. Defaults to "user_id".
        pred_key: As in :class:`AUC`. Defaults to "scores".
        label_key: As in :class:`AUC`. Defaults to "labels".
        prefix: See :class:`BaseMetric`. Defaults to None.
    """

    def __init__(
        self,
        group_key: str = "user_id",
        pred_key: str = "scores",
        label_key: str = "labels",
        prefix: str | None = None,
    ) -> None:
        super().__init__(pred_key, label_key, prefix=prefix)
        self.group_key = group_key

    def process(self, batch: Any, outputs: Any) -> None:
        scores, labels = self._scores_labels(batch, outputs)
        groups = to_numpy(self.fetch(self.group_key, batch, outputs, arg="group_key")).reshape(-1)
        if groups.shape[0] != scores.shape[0]:
            raise DataError(
                f"GAUC: {scores.shape[0]} scores but {groups.shape[0]} group ids "
                f"(key '{self.group_key}')."
            )
        self.results.extend(zip(scores.tolist(), labels.tolist(), groups.tolist()))

    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        if results:
            scores, labels, groups = zip(*results)
            auc, size = grouped_auc(np.asarray(scores), np.asarray(labels), np.asarray(groups))
        else:
            auc, size = np.zeros(0), np.zeros(0)
        used = ~np.isnan(auc)
        if used.any():
            gauc = float(np.sum(auc[used] * size[used]) / np.sum(size[used]))
        else:
            gauc = nan_with_warning("GAUC", f"none of the {auc.size} groups holds both classes")
        return {"gauc": gauc, "gauc/num_groups": int(used.sum())}
