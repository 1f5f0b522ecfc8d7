"""BERT: Devlin et al. 2018, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding" (https://arxiv.org/abs/1810.04805).

The math follows Hugging Face's ``BertModel`` / ``BertForPreTraining`` exactly, so their weights
load with equal outputs (``libai.model.zoo.hf`` maps the names). Where it differs:

- The masked-LM head runs on the predicted positions only when the batch gives them
  (``mlm_positions``, the original BERT ``max_predictions_per_seq`` format): B*P hidden states go
  through the vocabulary projection instead of B*S.
- ``pre_norm=True`` gives a pre-LN encoder (Xiong et al. 2020) with a LayerNorm after the last
  block; the embeddings keep their LayerNorm. Hugging Face has no such BERT to convert to.
- ``second_head`` picks the sentence-level task: "nsp" (BERT's next sentence prediction), "sop"
  (ALBERT's sentence order prediction; the same Linear(H, 2), its label says whether the two
  segments were swapped) or None (RoBERTa-style MLM only: no pooler, no second head; the
  parameters of Hugging Face's ``BertForMaskedLM``).

Batch (a dict of tensors; B batch, S sequence, P predictions per sequence):
``input_ids`` (B, S) long; ``attention_mask`` (B, S) 1 = token, 0 = padding (absent: no
padding); ``token_type_ids`` (B, S) (absent: zeros); ``mlm_positions`` (B, P) + ``mlm_labels``
(B, P), -100 in unused slots, or ``mlm_labels`` (B, S) alone with -100 at unmasked positions;
``next_sentence_label`` (B,) 0 = B follows A (in order), 1 = random (swapped).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from libai.registry import MODELS
from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import did_you_mean

from ..layers import (
    MaskedLMHead,
    Pooler,
    TransformerBlock,
    TransformerEmbeddings,
    init_transformer_weights,
    key_padding_mask,
    lm_token_stats,
    parallel_loss,
)

__all__ = ["BertForPreTraining", "BertForSequenceClassification", "BertModel"]

SECOND_HEADS = ("nsp", "sop", None)


def _arguments(scope: dict[str, Any]) -> dict[str, Any]:
    """The constructor's keyword arguments, from its ``locals()`` taken on its first line."""
    return {k: v for k, v in scope.items() if k not in ("self", "__class__")}


@MODELS.register_module()
class BertModel(nn.Module):
    """The BERT encoder: embeddings, ``num_layers`` :class:`TransformerBlock` s, optional pooler.

    Called with tensors (it is a backbone, it computes no loss):
    ``model(input_ids, attention_mask=None, token_type_ids=None) -> (hidden (B, S, H), pooled
    (B, H) or None)``.

    Args:
        vocab_size: Word pieces. Defaults to 30522.
        hidden_size: Model width H. Defaults to 768.
        num_layers: Transformer blocks. Defaults to 12.
        num_heads: Attention heads; must divide ``hidden_size``. Defaults to 12.
        ffn_hidden_size: MLP inner width. Defaults to 3072.
        max_position_embeddings: Longest sequence. Defaults to 512.
        type_vocab_size: Segment types. Defaults to 2.
        hidden_dropout: Dropout on embeddings and sub-layer outputs. Defaults to 0.1.
        attention_dropout: Dropout on attention probabilities. Defaults to 0.1.
        activation: MLP and MLM-head activation: "gelu", "gelu_tanh" or "relu". Defaults to "gelu".
        layer_norm_eps: LayerNorm epsilon. Defaults to 1e-12.
        pre_norm: Pre-LN blocks and a final LayerNorm instead of post-LN. Defaults to False.
        init_std: Std of the normal init of weights and embeddings. Defaults to 0.02.
        pad_token_id: Word row kept at zero, with no gradient (None for none). Defaults to 0.
        add_pooler: Build the [CLS] pooler. Defaults to True.
    """

    hf_model_type = "bert"
    parallel_blocks = ("TransformerBlock",)  # FSDP and activation checkpointing units

    def __init__(self, vocab_size: int = 30522, hidden_size: int = 768, num_layers: int = 12,
                 num_heads: int = 12, ffn_hidden_size: int = 3072,
                 max_position_embeddings: int = 512, type_vocab_size: int = 2,
                 hidden_dropout: float = 0.1, attention_dropout: float = 0.1,
                 activation: str = "gelu", layer_norm_eps: float = 1e-12, pre_norm: bool = False,
                 init_std: float = 0.02, pad_token_id: int | None = 0,
                 add_pooler: bool = True) -> None:
        config = _arguments(locals())
        super().__init__()
        self.config = config  # the arguments, for export and checks (libai.model.zoo.hf)
        self.vocab_size, self.max_position_embeddings = vocab_size, max_position_embeddings
        self.init_std = init_std
        self.embeddings = TransformerEmbeddings(
            vocab_size, hidden_size, max_position_embeddings, type_vocab_size, layer_norm_eps,
            hidden_dropout, padding_idx=pad_token_id)
        self.blocks = nn.ModuleList(
            TransformerBlock(hidden_size, num_heads, ffn_hidden_size, hidden_dropout,
                             attention_dropout, activation, layer_norm_eps, pre_norm)
            for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps) if pre_norm else None
        self.pooler = Pooler(hidden_size) if add_pooler else None
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)initialise every parameter as Hugging Face BERT does (see ``layers/init.py``)."""
        init_transformer_weights(self, self.init_std)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        mask = key_padding_mask(attention_mask)  # (B, 1, 1, S) bool, or None
        h = self.embeddings(input_ids, token_type_ids)  # (B, S, H)
        for block in self.blocks:
            h = block(h, mask)
        if self.final_norm is not None:
            h = self.final_norm(h)
        return h, (self.pooler(h) if self.pooler is not None else None)  # (B, S, H), (B, H)


@MODELS.register_module()
class BertForPreTraining(nn.Module):
    """BERT with the masked-LM head (tied to the word embeddings) and an optional NSP/SOP head.

    - train mode: ``{"mlm_loss", "nsp_loss" | "sop_loss"}`` (only ``mlm_loss`` when
      ``second_head`` is None); the engine sums them. ``num_items`` counts the masked tokens
      ``mlm_loss`` is the mean over (libai.model.contract).
    - eval mode: ``{"loss", "mlm_loss", "nll_sum" (B,), "num_tokens" (B,), "num_correct" (B,)}``
      for the MLM targets, plus ``"nsp_logits"`` (B, 2) and ``"nsp_loss"`` with a second head
      (for SOP too), and ``num_items``. Without
      ``mlm_labels`` in the batch: ``{"mlm_logits" (B, S, V)}`` (+ ``"nsp_logits"``).
    - :meth:`logits` gives the full logits.

    Args:
        second_head: "nsp", "sop" or None (see the module docstring). Defaults to "nsp".
        Others: as :class:`BertModel`.

    Raises:
        ConfigError: Unknown ``second_head`` or ``activation``, or ``num_heads`` does not
            divide ``hidden_size``.
    """

    hf_model_type = "bert"
    parallel_blocks = ("TransformerBlock",)  # FSDP and activation checkpointing units

    def __init__(self, vocab_size: int = 30522, hidden_size: int = 768, num_layers: int = 12,
                 num_heads: int = 12, ffn_hidden_size: int = 3072,
                 max_position_embeddings: int = 512, type_vocab_size: int = 2,
                 hidden_dropout: float = 0.1, attention_dropout: float = 0.1,
                 activation: str = "gelu", layer_norm_eps: float = 1e-12, pre_norm: bool = False,
                 init_std: float = 0.02, pad_token_id: int | None = 0,
                 second_head: str | None = "nsp") -> None:
        config = _arguments(locals())
        super().__init__()
        if second_head not in SECOND_HEADS:
            raise ConfigError(
                f"model.second_head={second_head!r} is unknown; use 'nsp', 'sop' or None (MLM "
                f"only).{did_you_mean(str(second_head), ['nsp', 'sop', 'None'])}")
        self.config, self.second_head = config, second_head
        base = {k: v for k, v in config.items() if k != "second_head"}
        self.bert = BertModel(**base, add_pooler=second_head is not None)
        self.vocab_size, self.max_position_embeddings = vocab_size, max_position_embeddings
        self.mlm_head = MaskedLMHead(hidden_size, vocab_size, activation, layer_norm_eps)
        self.sentence_head = nn.Linear(hidden_size, 2) if second_head else None
        self._init_heads()

    def init_weights(self) -> None:
        """(Re)initialise every parameter as Hugging Face BERT does; the MLM bias starts at 0."""
        self.bert.init_weights()
        self._init_heads()

    def _init_heads(self) -> None:
        init_transformer_weights(self.mlm_head, self.bert.init_std)
        nn.init.zeros_(self.mlm_head.bias)
        if self.sentence_head is not None:
            init_transformer_weights(self.sentence_head, self.bert.init_std)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """MLM logits (B, S, V) at every position, and the second head's (B, 2) or None."""
        h, pooled = self.bert(input_ids, attention_mask, token_type_ids)
        mlm = self.mlm_head(h, self.bert.embeddings.word_embeddings.weight)
        return mlm, (self.sentence_head(pooled) if self.sentence_head is not None else None)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        h, pooled = self.bert(batch["input_ids"], batch.get("attention_mask"),
                              batch.get("token_type_ids"))  # (B, S, H), (B, H)
        second = self.sentence_head(pooled) if self.sentence_head is not None else None  # (B, 2)
        labels, positions = batch.get("mlm_labels"), batch.get("mlm_positions")
        if labels is None and not self.training:
            mlm = self.mlm_head(h, self.bert.embeddings.word_embeddings.weight)  # (B, S, V)
            return {"mlm_logits": mlm} | ({"nsp_logits": second} if second is not None else {})
        if labels is None:
            raise DataError("BertForPreTraining needs 'mlm_labels' in a training batch: (B, P) "
                            "with 'mlm_positions' (B, P), or (B, S) with -100 at unmasked tokens")
        if positions is not None:  # only the P predicted positions reach the vocabulary
            h = h.gather(1, positions.unsqueeze(-1).expand(-1, -1, h.shape[-1]))  # (B, P, H)
        mlm = self.mlm_head(h, self.bert.embeddings.word_embeddings.weight)  # (B, P or S, V)
        if self.training:
            losses = {"mlm_loss": parallel_loss(F.cross_entropy(mlm.flatten(0, 1), labels.flatten()))}
            if second is not None:
                losses[f"{self.second_head}_loss"] = F.cross_entropy(second, self._pair_labels(batch))
            # the masked-LM loss is a mean over the masked tokens, whose number varies
            losses["num_items"] = {"mlm_loss": (labels != -100).sum()}
            return losses
        out = lm_token_stats(mlm, labels)
        loss = out["mlm_loss"] = out["nll_sum"].sum() / out["num_tokens"].sum().clamp(min=1)
        out["num_items"] = {"mlm_loss": out["num_tokens"].sum()}  # the evaluation loss weighs by it
        if second is not None:
            out["nsp_logits"] = second
            if "next_sentence_label" in batch:
                out["nsp_loss"] = F.cross_entropy(second.float(), batch["next_sentence_label"])
                loss = loss + out["nsp_loss"]
        out["loss"] = loss
        return out

    def _pair_labels(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        labels = batch.get("next_sentence_label")
        if labels is None:
            raise DataError(
                f"second_head={self.second_head!r} needs 'next_sentence_label' (B,) in the batch "
                f"(0 = in order, 1 = random/swapped); or set model.second_head=None for MLM only")
        return labels


@MODELS.register_module()
class BertForSequenceClassification(nn.Module):
    """BERT with a classifier on the pooled [CLS] state (Hugging Face's model of the same name).

    Batch: ``input_ids``, ``attention_mask`` and ``token_type_ids`` (both optional), ``labels``
    (B,). Train mode: ``{"loss"}``; eval mode: ``{"logits" (B, C)}`` plus ``"loss"`` when the
    batch has labels.

    Args:
        num_classes: Output classes C. Defaults to 2.
        classifier_dropout: Dropout before the classifier; None uses ``hidden_dropout``.
            Defaults to None.
        Others: as :class:`BertModel`.
    """

    hf_model_type = "bert"
    parallel_blocks = ("TransformerBlock",)  # FSDP and activation checkpointing units

    def __init__(self, vocab_size: int = 30522, hidden_size: int = 768, num_layers: int = 12,
                 num_heads: int = 12, ffn_hidden_size: int = 3072,
                 max_position_embeddings: int = 512, type_vocab_size: int = 2,
                 hidden_dropout: float = 0.1, attention_dropout: float = 0.1,
                 activation: str = "gelu", layer_norm_eps: float = 1e-12, pre_norm: bool = False,
                 init_std: float = 0.02, pad_token_id: int | None = 0, num_classes: int = 2,
                 classifier_dropout: float | None = None) -> None:
        config = _arguments(locals())
        super().__init__()
        self.config = config
        base = {k: v for k, v in config.items() if k not in ("num_classes", "classifier_dropout")}
        self.bert = BertModel(**base, add_pooler=True)
        self.vocab_size, self.max_position_embeddings = vocab_size, max_position_embeddings
        self.dropout = nn.Dropout(hidden_dropout if classifier_dropout is None else classifier_dropout)
        self.classifier = nn.Linear(hidden_size, num_classes)
        init_transformer_weights(self.classifier, init_std)

    def init_weights(self) -> None:
        """(Re)initialise every parameter as Hugging Face BERT does."""
        self.bert.init_weights()
        init_transformer_weights(self.classifier, self.bert.init_std)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        _, pooled = self.bert(batch["input_ids"], batch.get("attention_mask"),
                              batch.get("token_type_ids"))  # (B, H)
        logits = self.classifier(self.dropout(pooled))  # (B, C)
        labels = batch.get("labels")
        if self.training:
            if labels is None:
                raise DataError("BertForSequenceClassification needs 'labels' (B,) in a "
                                "training batch")
            return {"loss": F.cross_entropy(logits, labels)}
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.float(), labels)
        return out
