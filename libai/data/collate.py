"""Collate functions: how a list of dataset items becomes the batch the model is called with.

Registered in ``COLLATE_FUNCTIONS`` and chosen with ``collate_fn`` in a data loader config, as a
name (``collate_fn="pseudo_collate"``) or a dict whose extra keys are bound as keyword arguments
(``collate_fn=dict(type="my_collate", pad_value=0)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch.utils.data import default_collate as _torch_default_collate

from libai.registry import COLLATE_FUNCTIONS

__all__ = ["default_collate", "pseudo_collate"]


# ``torch.utils.data.default_collate`` itself, not a wrapper: it runs once per batch.
# It stacks a list of items into tensors, keeping their structure:
# ``[{"inputs": (64,), "labels": ()}] * B`` becomes ``{"inputs": (B, 64), "labels": (B,)}``;
# numbers and numpy arrays become tensors, strings become lists. It needs items of equal shapes.
default_collate = COLLATE_FUNCTIONS.register_module(name="default_collate", module=_torch_default_collate)


@COLLATE_FUNCTIONS.register_module()
def pseudo_collate(batch: Sequence[Any]) -> Any:
    """Transpose a list of items into lists, without stacking or converting anything.

    ``[{"img": a, "label": 1}, {"img": b, "label": 2}]`` becomes ``{"img": [a, b], "label": [1, 2]}``
    (nested dicts are transposed too); items that are tuples or lists of equal length become a
    tuple of lists; anything else becomes a list. For items of different shapes (detection boxes,
    variable-length text) that the model pads itself.

    Args:
        batch: The items of one batch.

    Returns:
        The transposed batch.
    """
    if not batch:
        return []
    first = batch[0]
    if isinstance(first, Mapping):
        # Recurse into nested dicts only: a per-sample list (boxes, tokens) must stay one list
        # per sample, not be transposed.
        out = {}
        for key in first:
            values = [item[key] for item in batch]
            out[key] = pseudo_collate(values) if isinstance(values[0], Mapping) else values
        return out
    if isinstance(first, (tuple, list)) and all(len(item) == len(first) for item in batch):
        # Keep the outer structure (a tuple of fields) but do not recurse into the fields:
        # a field that is itself a list (e.g. boxes) stays one list per sample.
        return tuple(list(field) for field in zip(*batch))
    return list(batch)
