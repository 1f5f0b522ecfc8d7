"""Llama: Touvron et al. 2023 ("LLaMA", "Llama 2") and Grattafiori et al. 2024 ("The Llama 3 Herd
of Models").

The math follows Hugging Face's ``LlamaForCausalLM`` (their weights load with equal logits;
``hf_llama.py`` maps the names): pre-norm blocks with RMSNorm, rotary position embeddings (no
learned positions) with Llama 3's frequency scaling, grouped-query attention (``num_kv_heads``
key/value heads, each shared by ``num_heads / num_kv_heads`` query heads), the SwiGLU MLP, no
biases anywhere, a final RMSNorm and an LM head that may be tied to the embeddings (Llama 3.2
1B/3B) or not (Llama 2, Llama 3.1 8B). Init: N(0, init_std) for every matrix and embedding,
norms at 1, as Hugging Face's. As in libai's GPT-2, the labels come already shifted.

Batch: ``input_ids`` (B, S) long, ``labels`` (B, S) long (-100 where nothing is predicted) and
optionally ``attention_mask`` (B, S), 0 on padding. Train mode: ``{"loss", "num_items"}``. Eval
mode: ``{"loss", "nll_sum", "num_tokens", "num_correct"}`` (B,) each, or ``{"logits"}`` without
labels. Generation is :func:`libai.model.generation.generate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from libai.utils.errors import ConfigError, DataError

from ..layers import (
    GrowingKVCache,
    RMSNorm,
    RotaryEmbedding,
    SwiGLU,
    TiedLMHead,
    apply_rotary_emb,
    causal_padding_mask,
    check_rope_scaling,
    padding_position_ids,
)
from .causal_lm import CausalLM
from .config import ModelConfig, config_signature
from .family import ModelFamily

__all__ = ["LLAMA", "LlamaBlock", "LlamaConfig", "LlamaForCausalLM", "LlamaModel",
           "init_llama_weights"]


class _ConstantDict(dict):
    """A dict that refuses changes: a dataclass default must be hashable (each config gets a
    plain copy in ``__post_init__``)."""

    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a config default cannot change: copy it with dict(...)")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse


LLAMA3_2_ROPE_SCALING = _ConstantDict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=8192)


@dataclass(frozen=True)
class LlamaConfig(ModelConfig):
    """Llama's dimensions and options, shared by :class:`LlamaModel` and
    :class:`LlamaForCausalLM`; the defaults are Llama 3.2 1B's (1,235,814,400 parameters).

    Attributes:
        vocab_size: Tokens. Defaults to 128256.
        hidden_size: Model width H. Defaults to 2048.
        num_layers: Transformer blocks. Defaults to 16.
        num_heads: Query heads. Defaults to 32.
        num_kv_heads: Key/value heads; must divide ``num_heads``. None means ``num_heads``
            (multi-head attention, Llama 2 7B). Defaults to 8.
        head_dim: Width of one head (even: RoPE rotates pairs). None means
            ``hidden_size // num_heads``. Defaults to None.
        ffn_hidden_size: SwiGLU inner width. Defaults to 8192.
        max_position_embeddings: Longest context (the KV cache's and the data's limit).
            Defaults to 131072.
        rms_norm_eps: RMSNorm epsilon. Defaults to 1e-5.
        rope_theta: RoPE base wavelength. Defaults to 500000.0.
        rope_scaling: None, or Llama 3's frequency scaling as Hugging Face writes it
            (``layers/rope.py``). Defaults to Llama 3.2's: factor 32, low/high frequency
            factors 1 and 4, original context 8192.
        tie_word_embeddings: The LM head is the embedding matrix. Defaults to True.
        attention_dropout: Dropout on attention probabilities. Defaults to 0.0.
        init_std: Std of the normal init. Defaults to 0.02.

    Raises:
        ConfigError: A size that is not a positive whole number, heads that do not divide (or
            an odd head width), a bad ``rope_scaling``, or a probability outside [0, 1].
    """

    vocab_size: int = 128256
    hidden_size: int = 2048
    num_layers: int = 16
    num_heads: int = 32
    num_kv_heads: int | None = 8
    head_dim: int | None = None
    ffn_hidden_size: int = 8192
    max_position_embeddings: int = 131072
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: dict | None = LLAMA3_2_ROPE_SCALING
    tie_word_embeddings: bool = True
    attention_dropout: float = 0.0
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for key in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                    "head_dim", "ffn_hidden_size", "max_position_embeddings"):
            value = getattr(self, key)
            optional = key in ("num_kv_heads", "head_dim")
            if not (optional and value is None) and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"model.{key}={value!r}: expected a positive whole number"
                                  + (" or None" if optional else ""))
        if self.num_heads % self.kv_heads:
            fits = [d for d in range(1, self.num_heads + 1) if self.num_heads % d == 0]
            raise ConfigError(f"model.num_kv_heads={self.kv_heads} does not divide model.num_heads="
                              f"{self.num_heads}: each key/value head serves a whole group of "
                              f"query heads; choose among {fits}")
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ConfigError(f"model.hidden_size={self.hidden_size} is not divisible by "
                              f"model.num_heads={self.num_heads}: change one, or set "
                              f"model.head_dim")
        if self.head_size % 2:
            raise ConfigError(f"the head width {self.head_size} (model.head_dim, or hidden_size "
                              f"// num_heads) is odd: rotary embeddings rotate pairs of channels")
        for key, fits, wanted in (("rms_norm_eps", lambda v: v > 0, "a positive number"),
                                  ("rope_theta", lambda v: v > 0, "a positive number"),
                                  ("init_std", lambda v: v >= 0, "a number >= 0"),
                                  ("attention_dropout", lambda v: 0 <= v <= 1, "in [0, 1]")):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or not fits(value):
                raise ConfigError(f"model.{key}={value!r}: expected {wanted}")
        if not isinstance(self.tie_word_embeddings, bool):
            raise ConfigError(f"model.tie_word_embeddings={self.tie_word_embeddings!r}: expected "
                              f"True or False")
        object.__setattr__(self, "rope_scaling", check_rope_scaling(self.rope_scaling))

    @property
    def kv_heads(self) -> int:
        """``num_kv_heads``, or ``num_heads`` when None."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def head_size(self) -> int:
        """``head_dim``, or ``hidden_size // num_heads`` when None."""
        return self.hidden_size // self.num_heads if self.head_dim is None else self.head_dim


class LlamaAttention(nn.Module):
    """Grouped-query self-attention with rotary positions, on SDPA, without biases.

    Shapes are read from the projections (``view(B, S, -1, hd)``), so a layer split by tensor
    parallel (whole query and key/value heads per process) needs no change.
    """

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.head_dim, self.attention_dropout = c.head_size, c.attention_dropout
        q_width, kv_width = c.num_heads * c.head_size, c.kv_heads * c.head_size
        self.q_proj = nn.Linear(c.hidden_size, q_width, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, kv_width, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, kv_width, bias=False)
        self.out_proj = nn.Linear(q_width, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attn_mask: torch.Tensor | None = None, is_causal: bool = False,
                kv_cache: GrowingKVCache | None = None) -> torch.Tensor:
        """(B, S, H) -> (B, S, H); ``attn_mask`` boolean (True = attend) over the L keys."""
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, -1, self.head_dim).transpose(1, 2)  # (B, nh, S, hd)
        k = self.k_proj(x).view(B, S, -1, self.head_dim).transpose(1, 2)  # (B, nkv, S, hd)
        v = self.v_proj(x).view(B, S, -1, self.head_dim).transpose(1, 2)  # (B, nkv, S, hd)
        q, k = apply_rotary_emb(q, cos, sin), apply_rotary_emb(k, cos, sin)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, nkv, L, hd), L = cached + S
        groups = q.shape[1] // k.shape[1]  # query heads per key/value head
        # SDPA shares the key/value heads itself (enable_gqa) on its unmasked kernels; with a
        # mask they are repeated first, as Hugging Face does (the masked kernels lack GQA)
        gqa = groups > 1 and attn_mask is None
        if groups > 1 and not gqa:
            k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))  # (B, nh, L, hd)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, enable_gqa=gqa,
            dropout_p=self.attention_dropout if self.training else 0.0)  # (B, nh, S, hd)
        return self.out_proj(y.transpose(1, 2).reshape(B, S, -1))  # (B, S, H)


class LlamaBlock(nn.Module):
    """``x = x + attn(norm(x)); x = x + mlp(norm(x))``.

    ``tp_plan``: Megatron's split, as Hugging Face's Llama plan: q/k/v and gate/up column-wise
    (whole heads per process), the output and down projections row-wise. ``tp_divisible``: the
    counts ``parallel.tensor`` must divide for that (query and key/value heads), read by
    ``libai.parallel.apply_tensor_parallel`` before it splits anything.
    """

    tp_plan = {"attn.q_proj": "colwise", "attn.k_proj": "colwise", "attn.v_proj": "colwise",
               "attn.out_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise",
               "mlp.down_proj": "rowwise"}

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.tp_divisible = {"model.num_heads": c.num_heads, "model.num_kv_heads": c.kv_heads}
        self.attn_norm = RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.attn = LlamaAttention(c)
        self.mlp_norm = RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.mlp = SwiGLU(c.hidden_size, c.ffn_hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                attn_mask: torch.Tensor | None = None, is_causal: bool = False,
                kv_cache: GrowingKVCache | None = None) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, attn_mask, is_causal, kv_cache)
        return x + self.mlp(self.mlp_norm(x))  # (B, S, H)


@torch.no_grad()
def init_llama_weights(module: nn.Module, std: float = 0.02) -> None:
    """Hugging Face Llama's init: every Linear and Embedding weight N(0, std), RMSNorms at 1.
    Works on meta tensors (does nothing there)."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=std)
        elif isinstance(m, RMSNorm):
            nn.init.ones_(m.weight)


LLAMA = ModelFamily(
    "llama", "Llama", config=LlamaConfig, main="LlamaForCausalLM", blocks=("LlamaBlock",),
    shape_args=("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "ffn_hidden_size", "rms_norm_eps", "rope_theta", "rope_scaling",
                "tie_word_embeddings"),
    adapter="libai.model.zoo.hf_llama.LlamaAdapter")


@LLAMA.register
class LlamaModel(nn.Module):
    """The Llama decoder stack without the LM head.

    ``model(input_ids (B, S), kv_caches=None, attention_mask=None, position_ids=None) -> hidden
    (B, S, H)`` after the final norm. With ``kv_caches`` (:meth:`new_kv_caches`) the positions
    continue after the cached ones. ``attention_mask`` (B, L) marks padding (0) among all keys,
    the cached ones too; positions then count real tokens only (a left-padded prompt gets the
    positions it has alone) unless ``position_ids`` (B, S) are given. Without a mask SDPA runs
    its causal kernel; with one, an explicit mask (:func:`~libai.model.layers.causal_padding_mask`).

    Args:
        config: The dimensions and options. Defaults to None: :class:`LlamaConfig`'s defaults.
        **kwargs: :class:`LlamaConfig` fields, on top of ``config``.
    """

    tp_plan = {"embed_tokens": "vocab"}  # the embedding split by vocabulary rows
    __signature__ = config_signature(LlamaConfig)

    def __init__(self, config: LlamaConfig | None = None, **kwargs: Any) -> None:
        c = LlamaConfig.resolve(config, kwargs, type(self).__name__)
        super().__init__()
        self.config = c
        self.vocab_size, self.max_position_embeddings = c.vocab_size, c.max_position_embeddings
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.rotary = RotaryEmbedding(c.head_size, c.rope_theta, c.rope_scaling)
        self.blocks = nn.ModuleList(LlamaBlock(c) for _ in range(c.num_layers))
        self.final_norm = RMSNorm(c.hidden_size, eps=c.rms_norm_eps)
        self.init_weights()

    def init_weights(self) -> None:
        """(Re)initialise every parameter (:func:`init_llama_weights`)."""
        init_llama_weights(self, self.config.init_std)

    def new_kv_caches(self, batch_size: int) -> list[GrowingKVCache]:
        """Empty caches, one per block, of ``num_kv_heads`` heads, growing up to
        ``max_position_embeddings`` positions."""
        w, c = self.embed_tokens.weight, self.config
        return [GrowingKVCache(batch_size, c.kv_heads, c.head_size, self.max_position_embeddings,
                               w.device, w.dtype) for _ in self.blocks]

    def block_kwargs(self, h: torch.Tensor, input_ids: torch.Tensor,
                     attention_mask: torch.Tensor | None = None,
                     position_ids: torch.Tensor | None = None, past: int = 0) -> dict[str, Any]:
        """What every block takes besides the hidden state ``h`` (B, S, H), for ``input_ids``
        (B, S) after ``past`` cached positions: the rotary ``cos``/``sin`` of the positions, and
        SDPA's causal path or an explicit mask (``attention_mask`` (B, past + S) marks padding;
        positions then count the real tokens only, unless ``position_ids`` (B, S)).

        Raises:
            DataError: The sequence runs past the positions, or ``attention_mask`` does not fit.
        """
        (B, S), device = input_ids.shape, input_ids.device
        if past + S > self.max_position_embeddings:
            raise DataError(f"sequence length {past + S} > max_position_embeddings "
                            f"{self.max_position_embeddings}: shorten the data's seq_length or "
                            f"raise model.max_position_embeddings")
        mask = None
        if attention_mask is not None:
            if attention_mask.shape != (B, past + S):
                raise DataError(f"attention_mask has shape {tuple(attention_mask.shape)}; "
                                f"expected (batch, cached + new keys) = {(B, past + S)}")
            if position_ids is None:
                position_ids = padding_position_ids(attention_mask, S)  # (B, S)
            mask = causal_padding_mask(attention_mask, S)  # (B, 1, S, past + S)
        elif past and S > 1:  # SDPA's is_causal aligns the top-left corner; new queries sit below
            mask = torch.ones(S, past + S, dtype=torch.bool, device=device).tril(past)
        if position_ids is None:
            position_ids = torch.arange(past, past + S, device=device)[None]  # (1, S)
        cos, sin = self.rotary(position_ids, h.dtype)  # (B or 1, S, hd)
        return {"cos": cos, "sin": sin, "attn_mask": mask, "is_causal": mask is None and past == 0}

    def forward(self, input_ids: torch.Tensor, kv_caches: list[GrowingKVCache] | None = None,
                attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        past = kv_caches[0].length if kv_caches else 0
        h = self.embed_tokens(input_ids)  # (B, S, H)
        kwargs = self.block_kwargs(h, input_ids, attention_mask, position_ids, past)
        for i, block in enumerate(self.blocks):
            h = block(h, kv_cache=kv_caches[i] if kv_caches else None, **kwargs)
        return self.final_norm(h)  # (B, S, H)


@LLAMA.register
class LlamaForCausalLM(CausalLM, nn.Module):
    """Llama with its LM head (tied or not), the training losses and :meth:`generate`.

    Untied, the head is a Linear(H, V) that tensor parallel splits by vocabulary (column-wise),
    giving the same vocabulary-split logits as the tied head for the parallel cross-entropy.

    Args:
        config: The dimensions and options. Defaults to None: :class:`LlamaConfig`'s defaults.
        **kwargs: :class:`LlamaConfig` fields, on top of ``config``.
    """

    __signature__ = config_signature(LlamaConfig)

    def __init__(self, config: LlamaConfig | None = None, **kwargs: Any) -> None:
        c = LlamaConfig.resolve(config, kwargs, type(self).__name__)
        super().__init__()
        self.config = c
        self.transformer = LlamaModel(c)
        self.vocab_size, self.max_position_embeddings = c.vocab_size, c.max_position_embeddings
        if c.tie_word_embeddings:
            self.lm_head: nn.Module = TiedLMHead()
        else:
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
            self.tp_plan = {"lm_head": "colwise"}
            init_llama_weights(self.lm_head, c.init_std)

    def init_weights(self) -> None:
        """(Re)initialise every parameter (:func:`init_llama_weights`)."""
        init_llama_weights(self, self.config.init_std)

    def head_logits(self, h: torch.Tensor) -> torch.Tensor:
        """The LM head: hidden states (B, S, H) after the final norm to logits (B, S, V)."""
        if self.config.tie_word_embeddings:
            return self.lm_head(h, self.transformer.embed_tokens.weight)  # (B, S, V)
        logits, w = self.lm_head(h), self.lm_head.weight  # (B, S, V), or V / T under TP
        if type(w).__name__ != "DTensor":
            return logits
        from torch.distributed.tensor import DTensor, Shard

        # split by vocabulary as the tied head's: kept split for the parallel loss in training;
        # the whole shape is given, as the vocabulary may not split evenly
        shape = torch.Size((*logits.shape[:-1], self.vocab_size))
        logits = DTensor.from_local(logits, w.device_mesh, [Shard(-1)], run_check=False,
                                    shape=shape, stride=torch.empty(shape, device="meta").stride())
        return logits if self.training else logits.full_tensor()

    @property
    def pipeline_split(self) -> dict[str, tuple[str, ...]]:
        """The model in parts, as a pipeline runs it (libai.model.contract): ``forward`` is
        :meth:`pipeline_first`, the blocks and :meth:`pipeline_last`."""
        last = ("transformer.final_norm",) + (
            ("transformer.embed_tokens",) if self.config.tie_word_embeddings else ("lm_head",))
        return {"first": ("transformer.embed_tokens",), "last": last}

    def pipeline_first(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The first block's input (B, S, H)."""
        return self.transformer.embed_tokens(batch["input_ids"])

    def pipeline_block_kwargs(self, h: torch.Tensor,
                              batch: dict[str, torch.Tensor]) -> dict[str, Any]:
        """What every block takes besides the hidden state ``h``."""
        return self.transformer.block_kwargs(h, batch["input_ids"], batch.get("attention_mask"))
