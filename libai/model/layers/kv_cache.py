"""A KV cache that grows with the sequence, for models with long contexts (Llama 3: 131,072).

:class:`~libai.model.layers.KVCache` allocates ``max_length`` positions up front: at Llama 3's
context that is gigabytes per sequence that a short generation never touches. This one starts
small and doubles its buffers when a call needs more, up to ``max_length``.
"""

from __future__ import annotations

import torch

from .attention import KVCache

__all__ = ["GrowingKVCache"]


class GrowingKVCache(KVCache):
    """A :class:`KVCache` holding ``initial_length`` positions at first, doubled as needed up to
    ``max_length``; ``update`` and ``length`` are the same.

    Args:
        batch_size: Sequences decoded together.
        num_heads: Key/value heads of the layer (a grouped-query layer's ``num_kv_heads``).
        head_dim: Width of one head.
        max_length: Most positions the cache ever holds.
        device: Where the buffers live.
        dtype: Their dtype.
        initial_length: Positions allocated before the first growth. Defaults to 256.
    """

    def __init__(self, batch_size: int, num_heads: int, head_dim: int, max_length: int,
                 device: torch.device | str | None = None, dtype: torch.dtype | None = None,
                 initial_length: int = 256) -> None:
        super().__init__(batch_size, num_heads, head_dim, min(max_length, initial_length),
                         device, dtype)
        self.max_length = max_length

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``(B, nh, S, hd)`` keys and values; returns all cached ones, ``(B, nh, L+S, hd)``."""
        end, capacity = self.length + k.shape[2], self.keys.shape[2]
        if end > self.max_length:
            raise ValueError(f"KV cache holds {self.max_length} positions; {end} requested")
        if end > capacity:
            size = min(self.max_length, max(end, 2 * capacity))
            self.keys, self.values = self._grown(self.keys, size), self._grown(self.values, size)
        return super().update(k, v)

    def _grown(self, buffer: torch.Tensor, size: int) -> torch.Tensor:
        B, nh, _, hd = buffer.shape
        out = buffer.new_empty(B, nh, size, hd)  # (B, nh, size, hd)
        out[:, :, :self.length] = buffer[:, :, :self.length]
        return out
