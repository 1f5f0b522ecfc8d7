"""How a model reads labeled text: :func:`frame_ids` puts the specials around a text (and a
pair) and truncates it; :func:`pad_collate` pads a batch of such items to its longest one.
:class:`~libai.data.text.labeled.LabeledTextDataset` frames its items with the first and names
the second as its ``collate_fn``; ``libai predict`` uses both on new text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from libai.registry import COLLATE_FUNCTIONS

from .tokenizer import TextTokenizer

__all__ = ["IGNORE_INDEX", "frame_ids", "pad_collate"]

IGNORE_INDEX = -100  # label value cross_entropy skips (its default ignore_index)


def frame_ids(
    tokenizer: TextTokenizer, a: list[int], b: list[int] | None, max_seq_length: int
) -> dict[str, np.ndarray]:
    """``input_ids`` and ``token_type_ids`` of a text (and a pair) as the model reads them:
    ``[CLS] a [SEP] (b [SEP])`` for WordPiece, ``a <eot> (b <eot>)`` for BPE, truncated
    longest-first to ``max_seq_length``."""
    wordpiece = tokenizer.kind == "wordpiece"
    specials = (2 if wordpiece else 1) + (b is not None)
    a, b = _truncate(list(a), None if b is None else list(b), max_seq_length - specials)
    if wordpiece:
        ids = [tokenizer.cls_id, *a, tokenizer.sep_id] + (
            [*b, tokenizer.sep_id] if b is not None else []
        )
        types = [0] * (len(a) + 2) + [1] * ((len(b) + 1) if b is not None else 0)
    else:
        ids = [*a, tokenizer.eod_id] + ([*b, tokenizer.eod_id] if b is not None else [])
        types = [0] * len(ids)
    return {
        "input_ids": np.array(ids, dtype=np.int64),
        "token_type_ids": np.array(types, dtype=np.int8),
    }


def _truncate(a: list[int], b: list[int] | None, budget: int) -> tuple[list[int], list[int] | None]:
    """Cut the longer of the two until both fit ``budget`` tokens (Hugging Face's
    "longest_first")."""
    if b is None:
        return a[:budget], None
    while len(a) + len(b) > budget:
        if len(a) >= len(b):
            a.pop()
        else:
            b.pop()
    return a, b


@COLLATE_FUNCTIONS.register_module()
def pad_collate(
    batch: Sequence[Mapping[str, Any]], pad_id: int = 0, pad_to_multiple_of: int | None = None
) -> dict[str, torch.Tensor]:
    """Pad a batch of :class:`LabeledTextDataset` items to its longest one (right padding).

    ``input_ids`` pad with ``pad_id``, ``token_type_ids`` with 0, per-token ``labels`` with
    -100; ``attention_mask`` is 1 on tokens, 0 on padding. Whole-sequence labels are stacked.

    Args:
        batch: The items.
        pad_id: The padding token id (BERT's ``[PAD]`` is 0). Defaults to 0.
        pad_to_multiple_of: Round the padded length up to a multiple of it (tensor cores like
            multiples of 8). Defaults to None.
    """
    length = max(len(item["input_ids"]) for item in batch)
    if pad_to_multiple_of:
        length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
    n = len(batch)
    ids = torch.full((n, length), pad_id, dtype=torch.long)
    types = torch.zeros((n, length), dtype=torch.long)
    mask = torch.zeros((n, length), dtype=torch.long)
    for i, item in enumerate(batch):
        k = len(item["input_ids"])
        ids[i, :k] = torch.from_numpy(np.asarray(item["input_ids"], dtype=np.int64))
        types[i, :k] = torch.from_numpy(np.asarray(item["token_type_ids"], dtype=np.int64))
        mask[i, :k] = 1
    out = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if "labels" in batch[0]:
        out["labels"] = _stack_labels([item["labels"] for item in batch], length)
    return out


def _stack_labels(labels: list[Any], length: int) -> torch.Tensor:
    first = np.asarray(labels[0])
    if first.ndim == 1 and np.issubdtype(first.dtype, np.integer):  # per token: pad with -100
        out = torch.full((len(labels), length), IGNORE_INDEX, dtype=torch.long)
        for i, row in enumerate(labels):
            out[i, : len(row)] = torch.from_numpy(np.asarray(row, dtype=np.int64))
        return out
    return torch.from_numpy(np.stack([np.asarray(v) for v in labels]))
