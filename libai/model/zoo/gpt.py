"""GPT-2: Radford et al. 2019, "Language Models are Unsupervised Multitask Learners".

The math follows OpenAI's GPT-2 as Hugging Face's ``GPT2LMHeadModel`` implements it (their weights
load with equal logits; ``hf_gpt2.py`` maps the names): learned absolute positions, pre-LN
blocks with causal attention, a final LayerNorm, the LM head tied to the word embeddings without
a bias, the tanh-approximated GELU, and GPT-2's init (N(0, 0.02), the residual output projections
scaled by 1/sqrt(2 * num_layers)). Where it differs: q/k/v are three Linear layers (Hugging Face
keeps one fused ``c_attn`` Conv1D with transposed weights; the converter splits it), and the
labels come already shifted by the dataset (``labels[t]`` is the token after ``input_ids[t]``).

Batch: ``input_ids`` (B, S) long and ``labels`` (B, S) long, -100 where nothing is predicted;
optionally ``attention_mask`` (B, S), 0 on padding (left or right; padding is then kept out of
attention, at the cost of SDPA's explicit-mask kernel instead of its causal one). Generation is
:func:`libai.model.generation.generate`.
Train mode: ``{"loss"}`` (mean cross-entropy over the predicted tokens). Eval mode: ``{"loss",
"nll_sum" (B,), "num_tokens" (B,), "num_correct" (B,)}``, or ``{"logits" (B, S, V)}`` when the
batch has no labels.

:class:`GPTForSequenceClassification` is Hugging Face's ``GPT2ForSequenceClassification``: a
``score`` Linear(H, C) without bias on the hidden state of each sequence's last token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from libai.utils.errors import DataError

from ..layers import (
    KVCache,
    TiedLMHead,
    TransformerBlock,
    TransformerEmbeddings,
    causal_padding_mask,
    init_transformer_weights,
    padding_position_ids,
    scale_residual_projections,
)
from .causal_lm import CausalLM
from .classification import check_problem_type, classification_loss
from .config import ModelConfig, config_signature
from .family import ModelFamily

__all__ = ["GPT2", "GPTClassifierConfig", "GPTConfig", "GPTForCausalLM",
           "GPTForSequenceClassification", "GPTModel"]


@dataclass(frozen=True)
class GPTConfig(ModelConfig):
    """GPT-2's dimensions and options, shared by :class:`GPTModel` and :class:`GPTForCausalLM`;
    the defaults are GPT-2 small.

    Both classes take one (``GPTForCausalLM(GPTConfig(num_layers=2))``) or its fields as
    keyword arguments (``GPTForCausalLM(num_layers=2)``, what a config dict does).

    Attributes:
        vocab_size: Tokens. Defaults to 50257.
        hidden_size: Model width H. Defaults to 768.
        num_layers: Transformer blocks. Defaults to 12.
        num_heads: Attention heads; must divide ``hidden_size``. Defaults to 12.
        ffn_hidden_size: MLP inner width; None means 4 * hidden_size. Defaults to None.
        max_position_embeddings: Longest context. Defaults to 1024.
        hidden_dropout: Dropout on embeddings and sub-layer outputs. Defaults to 0.1.
        attention_dropout: Dropout on attention probabilities. Defaults to 0.1.
        activation: MLP activation: "gelu_tanh", "gelu" or "relu". Defaults to "gelu_tanh".
        layer_norm_eps: LayerNorm epsilon. Defaults to 1e-5.
        init_std: Std of the normal init. Defaults to 0.02.
    """

    vocab_size: int = 50257
    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    ffn_hidden_size: int | None = None
    max_position_embeddings: int = 1024
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu_tanh"
    layer_norm_eps: float = 1e-5
    init_std: float = 0.02


GPT2 = ModelFamily(
    "gpt2", "GPT-2", config=GPTConfig, main="GPTForCausalLM", blocks=("TransformerBlock",),
    shape_args=("vocab_size", "hidden_size", "num_layers", "num_heads", "ffn_hidden_size",
                "max_position_embeddings", "activation", "layer_norm_eps"),
    adapter="libai.model.zoo.hf_gpt2.GPT2Adapter")


@GPT2.register
class GPTModel(nn.Module):
    """The GPT-2 decoder stack without the LM head.

    Called with tensors: ``model(input_ids (B, S), kv_caches=None, attention_mask=None,
    position_ids=None) -> hidden (B, S, H)``, after the final LayerNorm. With ``kv_caches`` (one
    :class:`KVCache` per block, see :meth:`new_kv_caches`) the positions continue after the
    cached ones. ``attention_mask`` marks padding (0) among all the keys, the cached ones too,
    (B, L); the positions then count the real tokens only (a left-padded prompt gets the
    positions it has alone; right padding changes none) unless ``position_ids`` (B, S) are given.
    Without a mask, SDPA's ``is_causal`` path runs (flash kernels on GPU); with one, an explicit
    boolean mask (:func:`~libai.model.layers.causal_padding_mask`).

    Args:
        config: The dimensions and options. Defaults to None: :class:`GPTConfig`'s defaults.
        **kwargs: :class:`GPTConfig` fields, on top of ``config``.
    """

    __signature__ = config_signature(GPTConfig)

    def __init__(self, config: GPTConfig | None = None, **kwargs: Any) -> None:
        c = GPTConfig.resolve(config, kwargs, type(self).__name__)
        super().__init__()
        self.config = c  # the model contract's `config` (export, checks)
        self.vocab_size, self.max_position_embeddings = c.vocab_size, c.max_position_embeddings
        self.embeddings = TransformerEmbeddings(c.vocab_size, c.hidden_size,
                                                c.max_position_embeddings, dropout=c.hidden_dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(c.hidden_size, c.num_heads, c.ffn_hidden_size or 4 * c.hidden_size,
                             c.hidden_dropout, c.attention_dropout, c.activation, c.layer_norm_eps,
                             pre_norm=True)
            for _ in range(c.num_layers))
        self.final_norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)initialise every parameter with GPT-2's scheme (see ``layers/init.py``)."""
        init_transformer_weights(self, self.config.init_std)
        scale_residual_projections(self.blocks, self.config.init_std, len(self.blocks))

    def new_kv_caches(self, batch_size: int) -> list[KVCache]:
        """Empty caches, one per block, for up to ``max_position_embeddings`` positions."""
        w, heads = self.embeddings.word_embeddings.weight, self.config.num_heads
        return [KVCache(batch_size, heads, w.shape[1] // heads, self.max_position_embeddings,
                        w.device, w.dtype) for _ in self.blocks]

    def check_mask(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                   start: int = 0) -> None:
        """Refuse an ``attention_mask`` that does not fit ``input_ids`` (B, S) after ``start``
        cached positions, or keys beyond the position table.

        Raises:
            DataError: ``attention_mask`` is not (B, start + S), or the keys run past the
                positions.
        """
        if attention_mask is None:
            return
        S = input_ids.shape[1]
        if attention_mask.shape != (input_ids.shape[0], start + S):
            raise DataError(f"attention_mask has shape {tuple(attention_mask.shape)}; "
                            f"expected (batch, cached + new keys) = "
                            f"{(input_ids.shape[0], start + S)}")
        if start + S > self.max_position_embeddings:  # the unpadded path's check
            raise DataError(f"sequence length {start + S} > max_position_embeddings "
                            f"{self.max_position_embeddings}: shorten the data's "
                            f"max_seq_length or raise model.max_position_embeddings")

    def block_kwargs(self, input_ids: torch.Tensor,
                     attention_mask: torch.Tensor | None = None) -> dict[str, Any]:
        """What every block takes besides the hidden state, for ``input_ids`` (B, S): SDPA's
        causal path, or the explicit mask of a batch with ``attention_mask`` (B, L) over the L
        keys (:meth:`check_mask` checked)."""
        if attention_mask is None:
            return {"attn_mask": None, "is_causal": True}
        return {"attn_mask": causal_padding_mask(attention_mask, input_ids.shape[1]),
                "is_causal": False}  # (B, 1, S, L)

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
              position_ids: torch.Tensor | None = None, start: int = 0) -> torch.Tensor:
        """The blocks' input (B, S, H): token and position embeddings (positions counting the
        real tokens only when ``attention_mask`` marks padding, unless ``position_ids``)."""
        self.check_mask(input_ids, attention_mask, start)
        if attention_mask is not None and position_ids is None:
            position_ids = padding_position_ids(attention_mask, input_ids.shape[1])  # (B, S)
        return self.embeddings(input_ids, start_pos=start, position_ids=position_ids)

    def forward(self, input_ids: torch.Tensor, kv_caches: list[KVCache] | None = None,
                attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        start = kv_caches[0].length if kv_caches else 0
        h = self.embed(input_ids, attention_mask, position_ids, start)  # (B, S, H)
        kwargs = self.block_kwargs(input_ids, attention_mask)
        for i, block in enumerate(self.blocks):
            h = block(h, kv_cache=kv_caches[i] if kv_caches else None, **kwargs)
        return self.final_norm(h)  # (B, S, H)


@GPT2.register
class GPTForCausalLM(CausalLM, nn.Module):
    """GPT-2 with its tied LM head, the training losses and :meth:`generate`.

    Args:
        config: The dimensions and options. Defaults to None: :class:`GPTConfig`'s defaults.
        **kwargs: :class:`GPTConfig` fields, on top of ``config``.
    """

    __signature__ = config_signature(GPTConfig)

    def __init__(self, config: GPTConfig | None = None, **kwargs: Any) -> None:
        c = GPTConfig.resolve(config, kwargs, type(self).__name__)
        super().__init__()
        self.config = c
        self.transformer = GPTModel(c)
        self.vocab_size, self.max_position_embeddings = c.vocab_size, c.max_position_embeddings
        self.lm_head = TiedLMHead()

    def init_weights(self) -> None:
        """(Re)initialise every parameter with GPT-2's scheme."""
        self.transformer.init_weights()

    def head_logits(self, h: torch.Tensor) -> torch.Tensor:
        """The tied LM head: hidden states (B, S, H) after the final norm to logits (B, S, V)."""
        return self.lm_head(h, self.transformer.embeddings.word_embeddings.weight)

    # the model in parts, as a pipeline runs it (libai.model.contract): forward is these three
    pipeline_split = {"first": ("transformer.embeddings",),
                      "last": ("transformer.final_norm", "transformer.embeddings.word_embeddings")}

    def pipeline_first(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The first blocks' input (B, S, H)."""
        return self.transformer.embed(batch["input_ids"], batch.get("attention_mask"))

    def pipeline_block_kwargs(self, h: torch.Tensor,
                              batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """What every block takes besides the hidden state ``h``."""
        return self.transformer.block_kwargs(batch["input_ids"], batch.get("attention_mask"))


@dataclass(frozen=True)
class GPTClassifierConfig(GPTConfig):
    """:class:`GPTConfig` and the classifier of :class:`GPTForSequenceClassification`.

    Attributes:
        num_classes: Output classes C (1 for regression). Defaults to 2.
        problem_type: "single_label_classification", "regression" or
            "multi_label_classification"; None picks per batch as Hugging Face does (see
            ``libai.model.zoo.classification``). Defaults to None.
        pad_token_id: The padding id. Without an ``attention_mask`` in the batch, the last
            token that is not this id is scored (Hugging Face's rule); exported as the
            ``pad_token_id`` Hugging Face needs to score batches of several sequences (not
            ``<|endoftext|>``, which ends each text of libai's classification datasets).
            Defaults to None: the last position, when the batch has no ``attention_mask``.

    Raises:
        ConfigError: An unknown ``problem_type`` or a ``num_classes`` below 1.
    """

    num_classes: int = 2
    problem_type: str | None = None
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        check_problem_type(self.problem_type, self.num_classes, "GPTClassifierConfig")


@GPT2.register
class GPTForSequenceClassification(nn.Module):
    """GPT-2 scoring each sequence at its last token (Hugging Face's
    ``GPT2ForSequenceClassification``).

    The last token is the last one with ``attention_mask`` 1 (right padding; causal attention
    keeps the padding after it out of its state); without a mask, the last one that is not
    ``pad_token_id``, or the last position when that is None. Batch: ``input_ids`` (B, S),
    ``attention_mask`` (B, S) (optional), ``labels`` (B,) long, (B,) float or (B, C) float.
    Train mode: ``{"loss"}``; eval mode: ``{"logits" (B, C)}`` plus ``"loss"`` with labels.

    Args:
        config: The dimensions, options and classifier. Defaults to None:
            :class:`GPTClassifierConfig`'s defaults.
        **kwargs: :class:`GPTClassifierConfig` fields, on top of ``config``.
    """

    __signature__ = config_signature(GPTClassifierConfig)

    def __init__(self, config: GPTClassifierConfig | None = None, **kwargs: Any) -> None:
        c = GPTClassifierConfig.resolve(config, kwargs, type(self).__name__)
        super().__init__()
        self.config = c
        self.transformer = GPTModel(c.narrow(GPTConfig))
        self.vocab_size, self.max_position_embeddings = c.vocab_size, c.max_position_embeddings
        self.score = nn.Linear(c.hidden_size, c.num_classes, bias=False)
        init_transformer_weights(self.score, c.init_std)

    def init_weights(self) -> None:
        """(Re)initialise every parameter with GPT-2's scheme."""
        self.transformer.init_weights()
        init_transformer_weights(self.score, self.config.init_std)

    def last_token(self, input_ids: torch.Tensor,
                   attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B,) index of the token each sequence is scored at (see the class docstring)."""
        pad = self.config.pad_token_id
        if attention_mask is None and pad is None:
            return torch.full(input_ids.shape[:1], input_ids.shape[1] - 1, device=input_ids.device)
        keep = attention_mask != 0 if attention_mask is not None else input_ids != pad  # (B, S)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (S,)
        return (positions * keep).argmax(-1)  # (B,) the rightmost kept position

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        ids = batch["input_ids"]
        h = self.transformer(ids)  # (B, S, H)
        last = self.last_token(ids, batch.get("attention_mask"))  # (B,)
        logits = self.score(h[torch.arange(ids.shape[0], device=ids.device), last])  # (B, C)
        labels, name = batch.get("labels"), type(self).__name__
        if self.training and labels is None:
            raise DataError(f"{name} needs 'labels' (B,) long, (B,) float or (B, C) float in a "
                            f"training batch")
        out = {} if self.training else {"logits": logits}
        if labels is not None:
            out["loss"] = classification_loss(logits, labels, self.config.problem_type, name)
        return out

