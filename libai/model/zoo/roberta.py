"""RoBERTa: Liu et al. 2019, "RoBERTa: A Robustly Optimized BERT Pretraining Approach"
(https://arxiv.org/abs/1907.11692), as BERT's code with three differences, not a copy of it.

RoBERTa is BERT's post-LN encoder trained differently (masked LM only, masks drawn anew each
time a sample is read, byte-level BPE, larger batches). What changes in the model:

- Positions count from the padding index, as fairseq and Hugging Face's ``RobertaModel`` do: a
  token's position is ``pad_token_id + 1 + (its rank among the sequence's non-pad tokens)``, a
  pad's is ``pad_token_id`` (:meth:`RobertaModel.position_ids`). With ``pad_token_id=1`` a
  sequence of 512 tokens needs ``max_position_embeddings=514``; the model's
  ``max_position_embeddings`` attribute, which the engine checks the data against, is the
  longest sequence (``max_position_embeddings - pad_token_id - 1``).
- The position embedding has the padding row too (zero at init, no gradient).
- No next-sentence head and no pooler in the masked-LM model; its head (Hugging Face's
  ``lm_head``) always uses exact GELU, whatever the encoder's ``activation``.

The defaults are roberta-base's (vocabulary 50265, 514 positions, one token type, LayerNorm
epsilon 1e-5, ``<pad>`` = 1). The batch is :class:`BertForPreTraining`'s without
``next_sentence_label`` (``BertPretrainingDataset(next_sentence=None)``); ``token_type_ids`` may
be left out (all 0). ``libai.model.zoo.hf_roberta`` maps the weights to and from Hugging Face.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from libai.utils.errors import ConfigError, DataError

from .bert import BertConfig, BertForPreTraining, BertModel
from .config import config_signature
from .family import ModelFamily

__all__ = ["ROBERTA", "RobertaConfig", "RobertaForMaskedLM", "RobertaModel"]


@dataclass(frozen=True)
class RobertaConfig(BertConfig):
    """:class:`BertConfig` with roberta-base's defaults: the fields mean the same.

    ``max_position_embeddings`` counts the padding index's offset: the longest sequence is
    ``max_position_embeddings - pad_token_id - 1`` tokens (512 for roberta-base's 514).

    Raises:
        ConfigError: No ``pad_token_id`` (the positions count from it), or too few positions
            for one token after the offset.
    """

    vocab_size: int = 50265
    max_position_embeddings: int = 514
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: int | None = 1

    def __post_init__(self) -> None:
        pad, positions = self.pad_token_id, self.max_position_embeddings
        if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
            raise ConfigError(f"RoBERTa needs model.pad_token_id (an id >= 0, <pad> = 1 in "
                              f"roberta-base): its positions count from it; got {pad!r}")
        if isinstance(positions, int) and positions < pad + 2:
            raise ConfigError(
                f"model.max_position_embeddings={positions} leaves no position for a token: "
                f"RoBERTa's positions start at pad_token_id + 1 = {pad + 1}, so sequences of N "
                f"tokens need max_position_embeddings = N + {pad + 1}")

    @property
    def max_length(self) -> int:
        """The longest sequence: ``max_position_embeddings - pad_token_id - 1``."""
        return self.max_position_embeddings - self.pad_token_id - 1


ROBERTA = ModelFamily(
    "roberta", "RoBERTa", config=RobertaConfig, main="RobertaForMaskedLM",
    blocks=("TransformerBlock",),
    shape_args=("vocab_size", "hidden_size", "num_layers", "num_heads", "ffn_hidden_size",
                "max_position_embeddings", "type_vocab_size", "activation", "layer_norm_eps",
                "pad_token_id"),
    adapter="libai.model.zoo.hf_roberta.RobertaAdapter")


@ROBERTA.register
class RobertaModel(BertModel):
    """The RoBERTa encoder: :class:`BertModel` with positions counted from the padding index.

    Called as :class:`BertModel`: ``model(input_ids, attention_mask=None, token_type_ids=None)
    -> (hidden (B, S, H), pooled (B, H) or None)``. The positions come from ``input_ids``
    (``pad_token_id`` marks padding), as in Hugging Face; ``attention_mask`` only masks keys.

    Args:
        config: The dimensions and options. Defaults to None: :class:`RobertaConfig`'s defaults.
        add_pooler: Build the ``<s>`` pooler. Defaults to True (Hugging Face's ``RobertaModel``).
        **kwargs: :class:`RobertaConfig` fields, on top of ``config``.
    """

    config_class = RobertaConfig
    __signature__ = config_signature(RobertaConfig, add_pooler=True)

    def __init__(self, config: RobertaConfig | None = None, *, add_pooler: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(config, add_pooler=add_pooler, **kwargs)
        self.max_position_embeddings = self.config.max_length  # what the data is checked against
        positions = self.embeddings.position_embeddings
        positions.padding_idx = self.config.pad_token_id  # as Hugging Face: no gradient there
        with torch.no_grad():  # and zero at init (init_transformer_weights does so from now on)
            positions.weight[positions.padding_idx].zero_()

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``pad_token_id + 1 + rank`` of each non-pad token, ``pad_token_id`` for pads (B, S).

        Raises:
            DataError: The sequence is longer than the position table allows.
        """
        pad, length = self.config.pad_token_id, input_ids.shape[1]
        if length > self.max_position_embeddings:  # S alone bounds the positions: no sync
            raise DataError(
                f"sequence length {length} > {self.max_position_embeddings}, the longest RoBERTa "
                f"sequence with max_position_embeddings={self.config.max_position_embeddings} "
                f"(positions start at pad_token_id + 1 = {pad + 1}): shorten the data's "
                f"max_seq_length or set model.max_position_embeddings={length + pad + 1}")
        tokens = input_ids.ne(pad).int()  # (B, S) 1 = token
        return (tokens.cumsum(1).type_as(tokens) * tokens).long() + pad  # (B, S)


@ROBERTA.register
class RobertaForMaskedLM(BertForPreTraining):
    """RoBERTa with its masked-LM head (tied to the word embeddings), no pooler, no second head:
    :class:`BertForPreTraining` with ``second_head=None`` on a :class:`RobertaModel`.

    Train mode ``{"mlm_loss", "num_items"}``; eval mode the MLM statistics (``loss``,
    ``mlm_loss``, ``nll_sum``, ``num_tokens``, ``num_correct``), or ``{"mlm_logits"}`` without
    ``mlm_labels``; :meth:`logits` gives ``(mlm (B, S, V), None)``. The encoder is ``.bert``
    (Hugging Face's ``roberta.``), the head ``.mlm_head`` (``lm_head.``).

    Args:
        config: The dimensions and options. Defaults to None: :class:`RobertaConfig`'s defaults.
        **kwargs: :class:`RobertaConfig` fields, on top of ``config``.
    """

    config_class = RobertaConfig
    encoder_class = RobertaModel
    mlm_activation = "gelu"  # Hugging Face's RobertaLMHead: exact GELU whatever hidden_act
    __signature__ = config_signature(RobertaConfig)

    def __init__(self, config: RobertaConfig | None = None, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
