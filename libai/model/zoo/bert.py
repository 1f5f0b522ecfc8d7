"""BERT: Devlin et al. 2018, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding" (https://arxiv.org/abs/1810.04805).

The math follows Hugging Face's ``BertModel`` / ``BertForPreTraining`` exactly, so their weights
load with equal outputs (``hf_bert.py`` maps the names). Where it differs:

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

The fine-tuning heads (sequence and token classification) are in ``bert_heads.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import did_you_mean

from ..layers import (
    MaskedLMHead,
    Pooler,
    TransformerBlock,
    TransformerEmbeddings,
    forward_in_parts,
    init_transformer_weights,
    key_padding_mask,
    lm_items,
    lm_token_stats,
    parallel_loss,
)
from .config import ModelConfig, config_signature
from .family import ModelFamily

__all__ = ["BERT", "BertConfig", "BertForPreTraining", "BertModel", "BertPreTrainingConfig"]

SECOND_HEADS = ("nsp", "sop", None)


@dataclass(frozen=True)
class BertConfig(ModelConfig):
    """BERT's dimensions and options, shared by every BERT class; the defaults are BERT-base.

    Every class takes one (``BertModel(BertConfig(num_layers=2))``) or its fields as keyword
    arguments (``BertModel(num_layers=2)``, what a config dict does).

    Attributes:
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
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    ffn_hidden_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu"
    layer_norm_eps: float = 1e-12
    pre_norm: bool = False
    init_std: float = 0.02
    pad_token_id: int | None = 0


@dataclass(frozen=True)
class BertPreTrainingConfig(BertConfig):
    """:class:`BertConfig` and the sentence-level head of :class:`BertForPreTraining`.

    Attributes:
        second_head: "nsp", "sop" or None (see the module docstring). Defaults to "nsp".

    Raises:
        ConfigError: An unknown ``second_head``.
    """

    second_head: str | None = "nsp"

    def __post_init__(self) -> None:
        if self.second_head not in SECOND_HEADS:
            raise ConfigError(
                f"model.second_head={self.second_head!r} is unknown; use 'nsp', 'sop' or None "
                f"(MLM only).{did_you_mean(str(self.second_head), ['nsp', 'sop', 'None'])}")


BERT = ModelFamily(
    "bert", "BERT", config=BertConfig, main="BertForPreTraining", blocks=("TransformerBlock",),
    shape_args=("vocab_size", "hidden_size", "num_layers", "num_heads", "ffn_hidden_size",
                "max_position_embeddings", "type_vocab_size", "activation", "layer_norm_eps",
                "pre_norm"),
    adapter="libai.model.zoo.hf_bert.BertAdapter")


@BERT.register
class BertModel(nn.Module):
    """The BERT encoder: embeddings, ``num_layers`` :class:`TransformerBlock` s, optional pooler.

    Called with tensors (it is a backbone, it computes no loss):
    ``model(input_ids, attention_mask=None, token_type_ids=None) -> (hidden (B, S, H), pooled
    (B, H) or None)``.

    Args:
        config: The dimensions and options. Defaults to None: :class:`BertConfig`'s defaults.
        add_pooler: Build the [CLS] pooler. Defaults to True.
        **kwargs: :class:`BertConfig` fields, on top of ``config``.
    """

    config_class: type[BertConfig] = BertConfig  # a variant's own (RoBERTa: roberta.py)
    __signature__ = config_signature(BertConfig, add_pooler=True)

    def __init__(self, config: BertConfig | None = None, *, add_pooler: bool = True,
                 **kwargs: Any) -> None:
        c = self.config_class.resolve(config, kwargs, type(self).__name__)
        super().__init__()
        self.config = c  # the model contract's `config` (export, checks)
        self.vocab_size, self.max_position_embeddings = c.vocab_size, c.max_position_embeddings
        self.embeddings = TransformerEmbeddings(
            c.vocab_size, c.hidden_size, c.max_position_embeddings, c.type_vocab_size,
            c.layer_norm_eps, c.hidden_dropout, padding_idx=c.pad_token_id)
        self.blocks = nn.ModuleList(
            TransformerBlock(c.hidden_size, c.num_heads, c.ffn_hidden_size, c.hidden_dropout,
                             c.attention_dropout, c.activation, c.layer_norm_eps, c.pre_norm)
            for _ in range(c.num_layers))
        self.final_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps) if c.pre_norm else None
        self.pooler = Pooler(c.hidden_size) if add_pooler else None
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)initialise every parameter as Hugging Face BERT does (see ``layers/init.py``)."""
        init_transformer_weights(self, self.config.init_std)

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor | None:
        """The positions (B, S) of ``input_ids`` (B, S); None: 0 ... S - 1 (BERT's). A variant
        overrides it (RoBERTa counts from its padding index)."""
        return None

    def embed(self, input_ids: torch.Tensor,
              token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The first block's input (B, S, H)."""
        return self.embeddings(input_ids, token_type_ids, position_ids=self.position_ids(input_ids))

    def finish(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The last block's output (B, S, H) to the encoder's: after the final norm (pre-norm),
        and pooled (B, H) or None."""
        if self.final_norm is not None:
            h = self.final_norm(h)
        return h, (self.pooler(h) if self.pooler is not None else None)  # (B, S, H), (B, H)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        mask = key_padding_mask(attention_mask)  # (B, 1, 1, S) bool, or None
        h = self.embed(input_ids, token_type_ids)  # (B, S, H)
        for block in self.blocks:
            h = block(h, mask)
        return self.finish(h)


@BERT.register
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
        config: The dimensions, options and ``second_head``. Defaults to None:
            :class:`BertPreTrainingConfig`'s defaults.
        **kwargs: :class:`BertPreTrainingConfig` fields, on top of ``config``.

    Raises:
        ConfigError: Unknown ``second_head`` or ``activation``, or ``num_heads`` does not
            divide ``hidden_size``.
    """

    # a variant's own (RoBERTa: roberta.py): its config (one without `second_head` has none),
    # its encoder, and the MLM head's activation (None: the config's, as BERT)
    config_class: type[BertConfig] = BertPreTrainingConfig
    encoder_class: type[BertModel] = BertModel
    mlm_activation: str | None = None
    __signature__ = config_signature(BertPreTrainingConfig)

    def __init__(self, config: BertPreTrainingConfig | None = None, **kwargs: Any) -> None:
        c = self.config_class.resolve(config, kwargs, type(self).__name__)
        super().__init__()
        self.config, self.second_head = c, getattr(c, "second_head", None)
        self.bert = self.encoder_class(c.narrow(self.encoder_class.config_class),
                                       add_pooler=self.second_head is not None)
        self.vocab_size = c.vocab_size
        self.max_position_embeddings = self.bert.max_position_embeddings  # the longest sequence
        self.mlm_head = MaskedLMHead(c.hidden_size, c.vocab_size,
                                     self.mlm_activation or c.activation, c.layer_norm_eps)
        self.sentence_head = nn.Linear(c.hidden_size, 2) if self.second_head else None
        self._init_heads()

    def init_weights(self) -> None:
        """(Re)initialise every parameter as Hugging Face BERT does; the MLM bias starts at 0."""
        self.bert.init_weights()
        self._init_heads()

    def _init_heads(self) -> None:
        init_transformer_weights(self.mlm_head, self.config.init_std)
        nn.init.zeros_(self.mlm_head.bias)
        if self.sentence_head is not None:
            init_transformer_weights(self.sentence_head, self.config.init_std)

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               token_type_ids: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """MLM logits (B, S, V) at every position, and the second head's (B, 2) or None."""
        h, pooled = self.bert(input_ids, attention_mask, token_type_ids)
        mlm = self.mlm_head(h, self.bert.embeddings.word_embeddings.weight)
        return mlm, (self.sentence_head(pooled) if self.sentence_head is not None else None)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return forward_in_parts(self, self.bert.blocks, batch)

    @property
    def pipeline_split(self) -> dict[str, tuple[str, ...]]:
        """The model in parts, as a pipeline runs it (libai.model.contract): ``forward`` is
        :meth:`pipeline_first`, the blocks and :meth:`pipeline_last`."""
        last = ["bert.embeddings.word_embeddings", "mlm_head"]
        last += [f"bert.{name}" for name in ("final_norm", "pooler") if getattr(self.bert, name)]
        last += ["sentence_head"] if self.sentence_head is not None else []
        return {"first": ("bert.embeddings",), "last": tuple(last)}

    def pipeline_first(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The first block's input (B, S, H)."""
        return self.bert.embed(batch["input_ids"], batch.get("token_type_ids"))

    def pipeline_block_kwargs(self, h: torch.Tensor,
                              batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """What every block takes besides the hidden state: the padding mask."""
        return {"attn_mask": key_padding_mask(batch.get("attention_mask"))}  # (B, 1, 1, S)

    def why_no_output(self, key: str) -> str | None:
        """Why eval mode returns no ``key``: the sentence head is off (``second_head=None``)."""
        if key.startswith(("nsp_", "sop_")) and self.second_head is None:
            return (f"The model has no sentence head (model.second_head=None), so it returns no "
                    f"'{key}': set model.second_head='nsp' or 'sop', or remove the metric that "
                    f"reads '{key}'.")
        return None

    def count_items(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The ``num_items`` of a training batch (the masked tokens), from the batch alone."""
        return lm_items(batch, "mlm_labels", "mlm_loss")

    def pipeline_last(self, h: torch.Tensor, batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """The last block's output (B, S, H) to what ``forward`` returns."""
        h, pooled = self.bert.finish(h)  # (B, S, H), (B, H)
        second = self.sentence_head(pooled) if self.sentence_head is not None else None  # (B, 2)
        labels, positions = batch.get("mlm_labels"), batch.get("mlm_positions")
        if labels is None and not self.training:
            mlm = self.mlm_head(h, self.bert.embeddings.word_embeddings.weight)  # (B, S, V)
            return {"mlm_logits": mlm} | ({"nsp_logits": second} if second is not None else {})
        if labels is None:
            raise DataError(f"{type(self).__name__} needs 'mlm_labels' in a training batch: "
                            f"(B, P) with 'mlm_positions' (B, P), or (B, S) with -100 at "
                            f"unmasked tokens")
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
                f"(0 = in order, 1 = random/swapped), which BertDataset makes with next_sentence='nsp' "
                f"or 'sop'; or set model.second_head=None for MLM only")
        return labels
