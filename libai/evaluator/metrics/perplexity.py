"""Perplexity of a language model over the tokens of the whole evaluation set."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from libai.registry import METRICS
from libai.utils.errors import DataError

from ..base_metric import BaseMetric, nan_with_warning, to_numpy

__all__ = ["Perplexity"]


@METRICS.register_module()
class Perplexity(BaseMetric):
    """``exp(total token NLL / number of tokens)`` over the dataset: ``{"perplexity": ...}``.

    Tokens are pooled over all sequences (a long sequence weighs more than a short one), which
    is not the mean of per-sequence perplexities. Two ways to feed it:

    - Logits (B, T, V) under ``pred_key`` and target ids (B, T) under ``label_key``, already
      aligned: ``labels[b, t]`` is the token ``logits[b, t]`` predicts (shift them in the dataset
      or the model for next-token prediction). Positions equal to ``ignore_index`` are skipped.
    - Per-sequence sums the model computed itself: when the outputs hold both ``"nll_sum"`` and
      ``"num_tokens"`` (each of shape (B,)), they are used and no logits are needed.

    Each sample's entry is ``(nll_sum, num_tokens)``. With no token at all the value is NaN with
    a ``RuntimeWarning``.

    Args:
        pred_key: Key of the logits in the outputs (or batch); ignored when the model returns a
            tensor. Defaults to "logits".
        label_key: Key of the target ids, looked up in the outputs, then the batch.
            Defaults to "labels".
        ignore_index: Target id that marks positions to skip (padding, prompt).
            Defaults to -100.
        prefix: See :class:`BaseMetric`. Defaults to None.
    """

    #: Output keys of per-sequence sums that, when both present, replace the logits.
    nll_key = "nll_sum"
    count_key = "num_tokens"

    def __init__(
        self,
        pred_key: str = "logits",
        label_key: str = "labels",
        ignore_index: int = -100,
        prefix: str | None = None,
    ) -> None:
        super().__init__(prefix=prefix)
        self.pred_key = pred_key
        self.label_key = label_key
        self.ignore_index = ignore_index

    def process(self, batch: Any, outputs: Any) -> None:
        if isinstance(outputs, Mapping) and self.nll_key in outputs and self.count_key in outputs:
            nll = to_numpy(outputs[self.nll_key]).astype(np.float64).reshape(-1)
            count = to_numpy(outputs[self.count_key]).reshape(-1)
            if nll.shape != count.shape:
                raise DataError(
                    f"Perplexity: '{self.nll_key}' has {nll.shape[0]} values but "
                    f"'{self.count_key}' has {count.shape[0]}; both need one per sequence."
                )
        else:
            nll, count = self._from_logits(batch, outputs)
        self.results.extend(zip(nll.tolist(), count.astype(np.int64).tolist()))

    def _from_logits(self, batch: Any, outputs: Any) -> tuple[np.ndarray, np.ndarray]:
        logits = torch.as_tensor(self.fetch_pred(self.pred_key, batch, outputs))
        labels = torch.as_tensor(self.fetch(self.label_key, batch, outputs, arg="label_key"))
        if logits.dim() != 3 or labels.shape != logits.shape[:2]:
            raise DataError(
                f"Perplexity: expected logits (B, T, V) and labels (B, T), got logits of shape "
                f"{tuple(logits.shape)} (key '{self.pred_key}') and labels of shape "
                f"{tuple(labels.shape)} (key '{self.label_key}'). Without logits, return "
                f"'{self.nll_key}' and '{self.count_key}' per sequence from the model."
            )
        labels = labels.to(logits.device).long()
        b, t, v = logits.shape
        # float32 log-softmax: half precision loses digits that exp() then magnifies
        token_nll = F.cross_entropy(
            logits.reshape(b * t, v).float(),
            labels.reshape(b * t),
            ignore_index=self.ignore_index,
            reduction="none",
        ).reshape(b, t)  # (B, T), 0 at ignored positions
        nll = token_nll.sum(dim=1, dtype=torch.float64)
        count = (labels != self.ignore_index).sum(dim=1)
        return to_numpy(nll), to_numpy(count)

    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        arr = np.asarray(results, dtype=np.float64).reshape(-1, 2)
        tokens = arr[:, 1].sum()
        if tokens == 0:
            return {"perplexity": nan_with_warning("Perplexity", "no target tokens")}
        mean_nll = arr[:, 0].sum() / tokens
        return {"perplexity": math.exp(mean_nll) if mean_nll < 709.0 else math.inf}
