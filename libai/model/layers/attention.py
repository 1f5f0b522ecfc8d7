"""Multi-head self-attention on ``F.scaled_dot_product_attention``, with an optional KV cache.

Query, key and value have their own projections (not one fused ``3H`` matrix): a tensor-parallel
plan then shards each column-wise and the output projection row-wise, and the head count is read
from the projected width (``view(B, S, -1, head_dim)``), so a sharded layer needs no change.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from libai.utils.errors import ConfigError

__all__ = ["KVCache", "SelfAttention", "causal_padding_mask", "key_padding_mask",
           "padding_position_ids"]


def key_padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The boolean mask SDPA broadcasts over heads and queries: True = attend to this key.

    Args:
        attention_mask: ``(B, S)`` with 1 for tokens and 0 for padding (any integer or bool
            dtype), an already built boolean ``(B, 1, 1, S)`` mask, or None (no padding).

    Returns:
        A ``(B, 1, 1, S)`` bool tensor, or None.
    """
    if attention_mask is None or attention_mask.ndim == 4:
        return attention_mask
    return attention_mask[:, None, None, :].bool()  # (B, 1, 1, S)


def causal_padding_mask(attention_mask: torch.Tensor, query_length: int) -> torch.Tensor:
    """The boolean SDPA mask of a causal layer over a padded batch: True = attend.

    The queries are the last ``query_length`` of the ``L`` keys (with a KV cache, the keys are
    the cached ones and then this call's), so query ``i`` sits at key position
    ``L - query_length + i``. It attends to the keys at or before that position that are not
    padding, and always to itself: a padding query would otherwise get an all-False row, which
    SDPA turns into NaN, and the NaN would reach every token through the next layer's values.
    What a padding position computes is never read.

    Args:
        attention_mask: ``(B, L)`` over all keys, 1 (or True) for tokens and 0 for padding;
            left, right or inner padding alike.
        query_length: Queries S of this call, at most ``L``.

    Returns:
        A ``(B, 1, S, L)`` bool tensor (broadcast over heads).
    """
    L = attention_mask.shape[-1]
    keys = torch.arange(L, device=attention_mask.device)  # (L,)
    queries = keys[L - query_length:, None]  # (S, 1) each query's key position
    causal = keys[None, :] <= queries  # (S, L)
    mask = causal & attention_mask[:, None, None, :].bool()  # (B, 1, S, L)
    return mask | (keys[None, :] == queries)  # every query sees itself


def padding_position_ids(attention_mask: torch.Tensor, query_length: int | None = None
                         ) -> torch.Tensor:
    """Positions that count the real tokens only, as Hugging Face's ``generate`` gives them.

    A left-padded prompt gets the positions it has alone (0, 1, ...); right padding leaves the
    tokens' positions as they are. Padding positions are clamped at 0 (no real token attends to
    them, so their value does not matter).

    Args:
        attention_mask: ``(B, L)``, 1 for tokens and 0 for padding.
        query_length: Keep the last S positions only (the new tokens after a KV cache).
            Defaults to None: all ``L``.

    Returns:
        ``(B, S)`` long.
    """
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, L)
    return positions if query_length is None else positions[:, -query_length:]


class KVCache:
    """Keys and values of one attention layer for incremental decoding, in preallocated buffers.

    Args:
        batch_size: Sequences decoded together.
        num_heads: Attention heads of the layer.
        head_dim: Width of one head.
        max_length: Most positions the cache holds (the model's ``max_position_embeddings``).
        device: Where the buffers live.
        dtype: Their dtype (the model's activations).
    """

    def __init__(self, batch_size: int, num_heads: int, head_dim: int, max_length: int,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> None:
        shape = (batch_size, num_heads, max_length, head_dim)
        self.keys = torch.empty(shape, device=device, dtype=dtype)  # (B, nh, L, hd)
        self.values = torch.empty(shape, device=device, dtype=dtype)
        self.length = 0

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``(B, nh, S, hd)`` keys and values; returns all cached ones, ``(B, nh, L+S, hd)``."""
        start, end = self.length, self.length + k.shape[2]
        if end > self.keys.shape[2]:
            raise ValueError(f"KV cache holds {self.keys.shape[2]} positions; {end} requested")
        self.keys[:, :, start:end] = k
        self.values[:, :, start:end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]


class SelfAttention(nn.Module):
    """Multi-head self-attention: q/k/v projections, SDPA, output projection, dropout.

    Args:
        hidden_size: Model width H.
        num_heads: Attention heads; must divide ``hidden_size``.
        attention_dropout: Dropout on the attention probabilities (training only). Defaults to 0.
        hidden_dropout: Dropout on the output projection. Defaults to 0.
        bias: Biases on the four projections. Defaults to True.

    Raises:
        ConfigError: ``hidden_size`` is not a multiple of ``num_heads``.
    """

    def __init__(self, hidden_size: int, num_heads: int, attention_dropout: float = 0.0,
                 hidden_dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if hidden_size % num_heads:
            raise ConfigError(
                f"model.hidden_size {hidden_size} is not divisible by model.num_heads {num_heads}: "
                f"choose num_heads among the divisors of hidden_size (e.g. "
                f"{_nearest_divisor(hidden_size, num_heads)})")
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        if isinstance(attention_dropout, bool) or not isinstance(attention_dropout, (int, float)) \
                or not 0 <= attention_dropout <= 1:  # SDPA would fail only in the first step
            raise ValueError(f"attention_dropout={attention_dropout!r}: expected a probability "
                             f"in [0, 1].")
        self.attention_dropout = attention_dropout
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.out_proj = nn.Linear(hidden_size, hidden_size, bias=bias)
        self.dropout = nn.Dropout(hidden_dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False, kv_cache: KVCache | None = None) -> torch.Tensor:
        """Attend within ``x`` (B, S, H); returns (B, S, H).

        Args:
            x: Hidden states.
            attn_mask: Boolean mask broadcastable to (B, nh, S, L), True = attend, over the L
                keys (the cached ones too): see :func:`key_padding_mask` and
                :func:`causal_padding_mask`. Not combined with ``is_causal``.
            is_causal: Each position attends to itself and earlier ones only.
            kv_cache: Keys and values of earlier positions; this call's are appended. A causal
                call on a filled cache lets the new positions see every cached one.
        """
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, -1, self.head_dim).transpose(1, 2)  # (B, nh, S, hd)
        k = self.k_proj(x).view(B, S, -1, self.head_dim).transpose(1, 2)  # (B, nh, S, hd)
        v = self.v_proj(x).view(B, S, -1, self.head_dim).transpose(1, 2)  # (B, nh, S, hd)
        if kv_cache is not None:
            past = kv_cache.length
            k, v = kv_cache.update(k, v)  # (B, nh, past + S, hd)
            if is_causal and past:
                # SDPA's is_causal aligns the top-left corner; new queries sit at the bottom
                is_causal = False
                if S > 1:
                    attn_mask = torch.ones(S, past + S, dtype=torch.bool, device=x.device).tril(past)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal,
            dropout_p=self.attention_dropout if self.training else 0.0)  # (B, nh, S, hd)
        y = y.transpose(1, 2).reshape(B, S, -1)  # (B, S, H)
        return self.dropout(self.out_proj(y))


def _nearest_divisor(n: int, near: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - near), d))
