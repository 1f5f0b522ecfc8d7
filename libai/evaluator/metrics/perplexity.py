"""Perplexity of a language model over the tokens of the whole evaluation set."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from libai.registry import METRICS

from ..base_metric import nan_with_warning
from ._token import TokenMetric

__all__ = ["Perplexity"]


@METRICS.register_module()
class Perplexity(TokenMetric):
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

    sum_key = "nll_sum"

    def sums_from_logits(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        b, t, v = logits.shape
        # float32 log-softmax: half precision loses digits that exp() then magnifies
        token_nll = F.cross_entropy(
            logits.reshape(b * t, v).float(),
            labels.reshape(b * t),
            ignore_index=self.ignore_index,
            reduction="none",
        ).reshape(b, t)  # (B, T), 0 at ignored positions
        return token_nll.sum(dim=1, dtype=torch.float64)

    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        nll, tokens = self.totals(results)
        if tokens == 0:
            return {"perplexity": nan_with_warning("Perplexity", "no target tokens")}
        mean_nll = nll / tokens
        return {"perplexity": math.exp(mean_nll) if mean_nll < 709.0 else math.inf}
