"""BERT's fine-tuning heads, as Hugging Face's classes of the same names compute them.

- :class:`BertForSequenceClassification`: dropout and ``classifier`` Linear(H, C) on the pooled
  [CLS] state; the loss follows ``problem_type`` (``classification.py``: cross-entropy, MSE or
  binary cross-entropy, inferred from the labels when unset).
- :class:`BertForTokenClassification`: dropout and ``classifier`` Linear(H, C) on every hidden
  state; no pooler (Hugging Face's ``add_pooling_layer=False``); cross-entropy over the tokens
  whose label is not -100.

Both start from a pretrained encoder: ``load_from=dict(path=..., strict=False)`` with a
``BertForPreTraining`` checkpoint or Hugging Face folder loads ``bert.*`` and reports
``classifier.*`` as new (initialised here) and the pretraining heads as unused.

Batch (libai's fine-tuning contract): ``input_ids`` (B, S) long, ``attention_mask`` (B, S) 1 =
token (absent: no padding), ``token_type_ids`` (B, S) (absent: zeros), ``labels``: (B,) long,
(B,) float or (B, C) float for sequences, (B, S) long with -100 where nothing is scored for
tokens. Train mode: ``{"loss"}``; eval mode: ``{"logits"}`` ((B, C) or (B, S, C)) and ``"loss"``
when the batch has labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from libai.utils.errors import ConfigError, DataError

from ..layers import init_transformer_weights
from .bert import BERT, BertConfig, BertModel
from .classification import check_problem_type, classification_loss
from .config import config_signature

__all__ = ["BertClassifierConfig", "BertForSequenceClassification", "BertForTokenClassification"]


@dataclass(frozen=True)
class BertClassifierConfig(BertConfig):
    """:class:`BertConfig` and the classifier of :class:`BertForSequenceClassification` and
    :class:`BertForTokenClassification`.

    Attributes:
        num_classes: Output classes C (1 for regression). Defaults to 2.
        classifier_dropout: Dropout before the classifier; None uses ``hidden_dropout``.
            Defaults to None.
        problem_type: "single_label_classification", "regression" or
            "multi_label_classification" (Hugging Face's values); None picks per batch as
            Hugging Face does: regression when ``num_classes`` is 1, single-label for integer
            labels, multi-label otherwise. Token classification is single-label only.
            Defaults to None.

    Raises:
        ConfigError: An unknown ``problem_type`` or a ``num_classes`` below 1.
    """

    num_classes: int = 2
    classifier_dropout: float | None = None
    problem_type: str | None = None

    def __post_init__(self) -> None:
        check_problem_type(self.problem_type, self.num_classes, "BertClassifierConfig")


class _BertClassifier(nn.Module):
    """The parts both heads share: the encoder, the dropout, the classifier and their init."""

    add_pooler = True

    def __init__(self, config: BertClassifierConfig | None, kwargs: dict[str, Any]) -> None:
        c = BertClassifierConfig.resolve(config, kwargs, type(self).__name__)
        super().__init__()
        self.config = c  # the model contract's `config` (export, checks)
        self.bert = BertModel(c.narrow(BertConfig), add_pooler=self.add_pooler)
        self.vocab_size, self.max_position_embeddings = c.vocab_size, c.max_position_embeddings
        dropout = c.hidden_dropout if c.classifier_dropout is None else c.classifier_dropout
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(c.hidden_size, c.num_classes)
        init_transformer_weights(self.classifier, c.init_std)

    def init_weights(self) -> None:
        """(Re)initialise every parameter as Hugging Face BERT does."""
        self.bert.init_weights()
        init_transformer_weights(self.classifier, self.config.init_std)

    def _labels(self, batch: dict[str, torch.Tensor], shape: str) -> torch.Tensor | None:
        labels = batch.get("labels")
        if labels is None and self.training:
            raise DataError(f"{type(self).__name__} needs 'labels' {shape} in a training batch")
        return labels


@BERT.register
class BertForSequenceClassification(_BertClassifier):
    """BERT with a classifier on the pooled [CLS] state (Hugging Face's model of the same name).

    Train mode: ``{"loss"}``; eval mode: ``{"logits" (B, C)}`` plus ``"loss"`` when the batch
    has ``labels`` (see the module docstring and ``problem_type``).

    Args:
        config: The dimensions, options and classifier. Defaults to None:
            :class:`BertClassifierConfig`'s defaults.
        **kwargs: :class:`BertClassifierConfig` fields, on top of ``config``.
    """

    __signature__ = config_signature(BertClassifierConfig)

    def __init__(self, config: BertClassifierConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, kwargs)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        _, pooled = self.bert(batch["input_ids"], batch.get("attention_mask"),
                              batch.get("token_type_ids"))  # (B, H)
        logits = self.classifier(self.dropout(pooled))  # (B, C)
        labels = self._labels(batch, "(B,) long, (B,) float or (B, C) float")
        out = {} if self.training else {"logits": logits}
        if labels is not None:
            out["loss"] = classification_loss(logits, labels, self.config.problem_type,
                                              type(self).__name__)
        return out


@BERT.register
class BertForTokenClassification(_BertClassifier):
    """BERT with a classifier on every token (Hugging Face's model of the same name; no pooler).

    Train mode: ``{"loss", "num_items"}``, the loss a mean over the scored tokens (labels not
    -100), whose number ``num_items`` gives (libai.model.contract); eval mode:
    ``{"logits" (B, S, C)}`` plus ``"loss"`` and ``num_items`` when the batch has ``labels``.

    Args:
        config: The dimensions, options and classifier. Defaults to None:
            :class:`BertClassifierConfig`'s defaults.
        **kwargs: :class:`BertClassifierConfig` fields, on top of ``config``.

    Raises:
        ConfigError: A ``problem_type`` other than None or "single_label_classification".
    """

    __signature__ = config_signature(BertClassifierConfig)
    add_pooler = False

    def __init__(self, config: BertClassifierConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, kwargs)
        if self.config.problem_type not in (None, "single_label_classification"):
            raise ConfigError(
                f"BertForTokenClassification: model.problem_type="
                f"{self.config.problem_type!r}, but token classification is single-label "
                f"(one class per token, cross-entropy); leave problem_type=None")

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        h, _ = self.bert(batch["input_ids"], batch.get("attention_mask"),
                         batch.get("token_type_ids"))  # (B, S, H)
        logits = self.classifier(self.dropout(h))  # (B, S, C)
        labels = self._labels(batch, "(B, S) long, -100 where a token is not scored")
        out = {} if self.training else {"logits": logits}
        if labels is None:
            return out
        if labels.shape != logits.shape[:-1]:
            raise DataError(f"BertForTokenClassification wants labels (B, S) = "
                            f"{tuple(logits.shape[:-1])}, one per token, but got "
                            f"{tuple(labels.shape)}")
        out["loss"] = classification_loss(logits, labels, "single_label_classification",
                                          type(self).__name__)
        out["num_items"] = {"loss": (labels != -100).sum()}  # tokens scored: varies by batch
        return out
