"""Autoregressive decoding for the causal language models of the zoo (GPT-2, Llama).

:func:`generate` needs three things of a model, and nothing else:

- ``model.logits(input_ids (B, S), kv_caches, attention_mask=None, position_ids=None)``: the
  next-token logits (B, S, V), the new keys and values appended to ``kv_caches``;
  ``attention_mask`` (B, L) covers every key (the cached ones, then these S) and
  ``position_ids`` (B, S) are the positions of these S tokens;
- ``model.new_kv_caches(batch_size)``: empty caches for up to ``max_position_embeddings``
  positions;
- ``model.max_position_embeddings``: the longest context.

Prompts of different lengths go in one batch padded on the left, with ``attention_mask`` 0 on
the padding (Hugging Face's convention; right padding works too). Each token's position then
counts the real tokens before it (:func:`~libai.model.layers.padding_position_ids`), so a padded
prompt continues exactly as it does alone. Without a mask the model sees today's unpadded path.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from libai.utils.errors import ConfigError, DataError

from .layers.attention import padding_position_ids

__all__ = ["CausalLM", "check_generation_options", "generate", "next_token"]


class CausalLM(Protocol):
    """What :func:`generate` uses of a model (see the module docstring)."""

    max_position_embeddings: int

    def logits(self, input_ids: torch.Tensor, kv_caches: Any = None, *,
               attention_mask: torch.Tensor | None = None,
               position_ids: torch.Tensor | None = None) -> torch.Tensor: ...

    def new_kv_caches(self, batch_size: int) -> Any: ...


def _is_int(x: Any) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def check_generation_options(max_new_tokens: int, temperature: float = 1.0,
                             top_k: int | None = None, top_p: float | None = None,
                             eos_token_id: int | Sequence[int] | None = None) -> None:
    """Refuse a bad decoding option before any work, with one line naming it.

    Raises:
        ConfigError: ``max_new_tokens`` not an int >= 0, ``temperature`` not a finite number
            >= 0, ``top_k`` not an int >= 1, ``top_p`` not in (0, 1], or ``eos_token_id`` not
            a token id (an int >= 0) or a non-empty list of them.
    """
    if not _is_int(max_new_tokens) or max_new_tokens < 0:
        raise ConfigError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}.")
    if not _is_real(temperature) or not math.isfinite(temperature) or temperature < 0:
        raise ConfigError(f"temperature must be a finite number >= 0 (0 means greedy), got "
                          f"{temperature!r}.")
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise ConfigError(f"top_k must be an int >= 1 (or None for no top-k filter), got "
                          f"{top_k!r}.")
    if top_p is not None and (not _is_real(top_p) or not 0 < top_p <= 1):
        raise ConfigError(f"top_p is a total probability in (0, 1] (or None for no nucleus "
                          f"filter), got {top_p!r}.")
    if eos_token_id is None:
        return
    ids = [eos_token_id] if _is_int(eos_token_id) else eos_token_id
    if (isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence) or not ids
            or not all(_is_int(i) and i >= 0 for i in ids)):
        raise ConfigError(f"eos_token_id must be a token id (an int >= 0), a non-empty list of "
                          f"them, or None, got {eos_token_id!r}.")


def _check_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
    if input_ids.ndim != 2 or input_ids.dtype != torch.long or input_ids.shape[1] == 0:
        raise DataError(f"input_ids must be a (batch, length) long tensor with at least one "
                        f"token per row, got {input_ids.dtype} of shape {tuple(input_ids.shape)}.")
    if attention_mask is None:
        return
    if attention_mask.shape != input_ids.shape:
        raise DataError(f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids "
                        f"{tuple(input_ids.shape)}: give one 1 (token) or 0 (padding) per id.")
    empty = (attention_mask == 0).all(-1).nonzero().flatten().tolist()
    if empty:
        raise DataError(f"attention_mask row {empty[0]} is all padding: every prompt needs at "
                        f"least one token.")


def next_token(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, do_sample: bool = False,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Pick one token per row of ``logits`` (B, V): the argmax when not sampling or at
    temperature 0, else a sample after the temperature, top-k and top-p filters. Returns (B,)."""
    if not do_sample or temperature == 0:
        return logits.argmax(-1)  # (B,)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(-1)
        # drop a token when the tokens ranked above it already reach top_p (the first stays)
        drop = probs.cumsum(-1) - probs >= top_p
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]  # (B,)


@torch.no_grad()
def generate(model: CausalLM, input_ids: torch.Tensor, max_new_tokens: int, *,
             attention_mask: torch.Tensor | None = None, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, do_sample: bool = False,
             eos_token_id: int | Sequence[int] | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Continue ``input_ids`` (B, S) by up to ``max_new_tokens`` tokens; returns (B, S + n).

    Decodes with a KV cache. The context is cropped to the last ``max_position_embeddings``
    tokens (and the mask with it); once a sequence is that long, each step recomputes the
    cropped window (positions are absolute, so the cache cannot slide). Call in eval mode for
    deterministic outputs. The options are checked before any work
    (:func:`check_generation_options`).

    Args:
        model: A causal LM (see :class:`CausalLM`).
        input_ids: Prompt token ids, long; padding rows on the left with any id.
        max_new_tokens: Most tokens to add; 0 returns ``input_ids`` unchanged.
        attention_mask: (B, S), 1 for tokens and 0 for padding. Defaults to None: no padding.
        temperature: Divides the logits before sampling; 0 means greedy. Defaults to 1.0.
        top_k: Sample among the k most likely tokens only. Defaults to None.
        top_p: Sample among the smallest set of tokens whose probability reaches p
            (nucleus sampling). Defaults to None.
        do_sample: Sample; False picks the most likely token (greedy). Defaults to False.
        eos_token_id: An id, or a list of ids, that ends a sequence: a finished sequence gets
            the id it ended with again thereafter, and generation stops early once every
            sequence has finished. Defaults to None.
        generator: Random source for sampling (reproducible runs). Defaults to None.

    Raises:
        ConfigError: A bad option (one line naming it).
        DataError: ``input_ids`` not (B, S) long, or a mask of another shape or with a row
            of padding only.
    """
    check_generation_options(max_new_tokens, temperature, top_k, top_p, eos_token_id)
    _check_inputs(input_ids, attention_mask)
    ids, limit, batch = input_ids, model.max_position_embeddings, input_ids.shape[0]
    mask = None if attention_mask is None else attention_mask.long()  # (B, S), grows with ids
    eos = None if eos_token_id is None else torch.tensor(
        [eos_token_id] if _is_int(eos_token_id) else list(eos_token_id), device=ids.device)
    caches, cached = None, 0  # cached: positions in the caches
    done = torch.zeros(batch, dtype=torch.bool, device=ids.device)  # (B,)
    for _ in range(max_new_tokens):
        if caches is None or cached >= limit:  # (re)fill from the cropped context
            caches, window = model.new_kv_caches(batch), ids[:, -limit:]  # (B, S')
            cached = window.shape[1]
            keys = None if mask is None else mask[:, -cached:]  # (B, S')
            positions = None if keys is None else padding_position_ids(keys)
            logits = model.logits(window, caches, attention_mask=keys, position_ids=positions)
        else:
            cached += 1
            keys = None if mask is None else mask[:, -cached:]  # (B, cached + 1)
            positions = None if keys is None else padding_position_ids(keys, 1)  # (B, 1)
            logits = model.logits(ids[:, -1:], caches, attention_mask=keys,
                                  position_ids=positions)
        token = next_token(logits[:, -1].float(), temperature, top_k, top_p, do_sample,
                           generator)  # (B,)
        if eos is not None:
            token = torch.where(done, ids[:, -1], token)  # a finished row repeats its eos
            done = done | torch.isin(token, eos)
        ids = torch.cat([ids, token[:, None]], dim=1)  # (B, S + 1)
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=1)
        if eos is not None and bool(done.all()):
            break
    return ids
