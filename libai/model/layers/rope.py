"""Rotary position embeddings (RoPE, Su et al. 2021), with Llama 3's frequency scaling.

Each pair of channels ``(i, i + hd/2)`` of a query or key at position ``p`` is rotated by the
angle ``p * inv_freq[i]``, ``inv_freq[i] = theta^(-2i / hd)``: the dot product of a query and a
key then depends on their distance only. The pairing is the "rotate half" layout of Hugging
Face's Llama (their checkpoints permute Meta's interleaved q/k rows into it), so their weights
load as they are.

Llama 3.1 stretches the context by dividing the low frequencies (wavelengths longer than
``original_max_position_embeddings / low_freq_factor``) by ``factor``, leaving the high ones
(shorter than ``... / high_freq_factor``) alone and blending in between: ``rope_type="llama3"``
in Hugging Face's ``rope_scaling``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["LLAMA3_SCALING_KEYS", "RotaryEmbedding", "apply_rotary_emb", "check_rope_scaling",
           "rope_frequencies"]

#: The numbers of Llama 3's ``rope_scaling`` (besides ``rope_type="llama3"``).
LLAMA3_SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor",
                       "original_max_position_embeddings")


def check_rope_scaling(value: Any, path: str = "model.rope_scaling") -> dict[str, Any] | None:
    """``value`` (None or a Llama 3 ``rope_scaling`` mapping) as a plain dict, checked.

    Hugging Face's older spelling ``type`` is read as ``rope_type``.

    Raises:
        ConfigError: Not a mapping, another ``rope_type``, a missing or unknown key (with a
            did-you-mean), or a value that is not a positive number (``high_freq_factor``
            must exceed ``low_freq_factor``; the context length is a whole number).
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path}={value!r}: expected None or a dict like dict(rope_type="
                          f"'llama3', factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0, "
                          f"original_max_position_embeddings=8192)")
    given = dict(value)
    kind = given.pop("rope_type", given.pop("type", None))
    if kind != "llama3":
        raise ConfigError(f"{path}.rope_type={kind!r}: libai's rotary embeddings implement "
                          f"'llama3' scaling only (or {path}=None for none)")
    unknown = [k for k in given if k not in LLAMA3_SCALING_KEYS]
    if unknown:
        raise ConfigError(f"{path} has an unknown key {unknown[0]!r}."
                          f"{did_you_mean(str(unknown[0]), LLAMA3_SCALING_KEYS)} Its keys: "
                          f"rope_type, {', '.join(LLAMA3_SCALING_KEYS)}.")
    out: dict[str, Any] = {"rope_type": "llama3"}
    for key in LLAMA3_SCALING_KEYS:
        number = given.get(key)
        whole = key == "original_max_position_embeddings"
        kinds = (int,) if whole else (int, float)
        if isinstance(number, bool) or not isinstance(number, kinds) or not 0 < number < math.inf:
            raise ConfigError(f"{path}.{key}={number!r}: expected a positive "
                              f"{'whole number' if whole else 'number'}")
        out[key] = number if whole else float(number)
    if out["high_freq_factor"] <= out["low_freq_factor"]:
        raise ConfigError(f"{path}.high_freq_factor={out['high_freq_factor']} must exceed "
                          f"{path}.low_freq_factor={out['low_freq_factor']} (Llama 3: 4.0 and 1.0)")
    return out


def rope_frequencies(head_dim: int, theta: float,
                     scaling: Mapping[str, Any] | None = None) -> torch.Tensor:
    """The ``(head_dim // 2,)`` float32 inverse frequencies, on the CPU.

    Args:
        head_dim: Width of one head (even).
        theta: The base wavelength (Llama 2: 10,000; Llama 3: 500,000).
        scaling: None, or Llama 3's ``{"rope_type": "llama3", "factor", "low_freq_factor",
            "high_freq_factor", "original_max_position_embeddings"}``. Defaults to None.
    """
    # float32 as Hugging Face computes them, so that their logits are matched to the last bits
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    inv_freq = 1.0 / (theta ** exponents)  # (hd/2,)
    if scaling is None:
        return inv_freq
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    context = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > context / low, inv_freq / factor, inv_freq)
    smooth = (context / wavelen - low) / (high - low)  # 0 at the low band's edge, 1 at the high
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= context / high) & (wavelen <= context / low)
    return torch.where(medium, blended, scaled)


class RotaryEmbedding(nn.Module):
    """The cosines and sines of the rotation at given positions.

    The frequencies are kept as Python floats, not as a buffer: a model built on the meta device
    that receives its weights with ``load_state_dict(assign=True)`` (``from_hf_pretrained``)
    would keep a meta buffer, and ``model.to(torch.bfloat16)`` would round them. They become a
    tensor of a few dozen numbers on each call.

    Args:
        head_dim: Width of one head.
        theta: The base wavelength. Defaults to 10000.0.
        scaling: Llama 3's frequency scaling (see :func:`rope_frequencies`). Defaults to None.
    """

    def __init__(self, head_dim: int, theta: float = 10000.0,
                 scaling: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.inv_freq = tuple(rope_frequencies(head_dim, theta, scaling).tolist())

    def forward(self, position_ids: torch.Tensor,
                dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """``position_ids`` (B, S) (or (1, S), shared by the batch) -> cos, sin (B, S, hd) in
        ``dtype``; the angles are computed in float32."""
        inv_freq = torch.tensor(self.inv_freq, dtype=torch.float32, device=position_ids.device)
        freqs = position_ids[..., None].float() * inv_freq  # (B, S, hd/2)
        angles = torch.cat((freqs, freqs), dim=-1)  # (B, S, hd)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}"


def apply_rotary_emb(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (B, nh, S, hd) by the angles of ``cos``/``sin`` (B, S, hd); returns
    (B, nh, S, hd)."""
    cos, sin = cos[:, None], sin[:, None]  # (B, 1, S, hd): the same angle for every head
    x1, x2 = x.chunk(2, dim=-1)  # (B, nh, S, hd/2) each
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin
