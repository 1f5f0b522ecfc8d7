"""A model in parts, as a pipeline runs it: the first part (embeddings) makes the hidden state,
the blocks transform it, the last part (final norm, heads, losses) turns it into what
``forward`` returns. A model whose ``forward`` is :func:`forward_in_parts` computes the same
thing in one process as split over pipeline stages (libai.parallel.pipeline): one code path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

__all__ = ["forward_in_parts", "lm_items"]


def forward_in_parts(model: nn.Module, blocks: Iterable[nn.Module], batch: Any) -> Any:
    """``model.pipeline_last(blocks(model.pipeline_first(batch)), batch)``, each block called
    as ``block(h, **model.pipeline_block_kwargs(h, batch))``."""
    h = model.pipeline_first(batch)  # (B, S, H)
    kwargs = model.pipeline_block_kwargs(h, batch)
    for block in blocks:
        h = block(h, **kwargs)
    return model.pipeline_last(h, batch)


def lm_items(batch: dict[str, torch.Tensor], labels: str, loss: str) -> dict[str, torch.Tensor]:
    """``{loss: tokens predicted}`` (labels other than -100) of a language-model batch: the
    ``num_items`` its loss is a mean over, counted from the batch alone (``count_items``)."""
    return {loss: (batch[labels] != -100).sum()}
