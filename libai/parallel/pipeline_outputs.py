"""What a pipeline's last stage makes of a microbatch's outputs: in training its share of the
step's loss (:class:`Weigher`), in evaluation one batch's outputs from its microbatches'
(:func:`merge_outputs`). Used by :mod:`libai.parallel.pipeline_module`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from libai.utils.errors import TrainingError

__all__ = ["Weigher", "batch_size_of", "merge_outputs"]


class Weigher:
    """Turns the last part's outputs on a microbatch into its share of the step's loss.

    A loss term with ``num_items`` weighs ``items * shares / total items`` (the total over every
    microbatch and data share: ``totals``), another ``samples / batch``; both divided by the
    accumulation window. The weighted terms sum to the loss whose gradient, summed over the
    microbatches (and averaged over the data shares), is one process's on the whole batch.
    """

    def __init__(self, totals: dict | None, batch_size: int, divisor: int, shares: int,
                 model: nn.Module) -> None:
        self.totals, self.batch_size, self.divisor, self.shares = totals, batch_size, divisor, shares
        self.name = type(model).__name__

    def __call__(self, outputs: Any, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if isinstance(outputs, torch.Tensor):
            outputs = {"loss": outputs}
        if not isinstance(outputs, Mapping):
            raise TrainingError(f"In train mode {self.name}.pipeline_last returned "
                                f"{type(outputs).__name__}; it must return a dict with a 'loss' "
                                f"entry, as forward does.")
        items = outputs.get("num_items") or {}
        if items and (self.totals is None or set(items) - set(self.totals)):
            raise TrainingError(
                f"{self.name} returns num_items for {sorted(items)}: a pipeline weighs those "
                f"losses by their items before any microbatch runs, so the model must count them "
                f"from the batch alone: give it count_items(batch) -> {{loss key: count}} "
                f"(libai.model.contract).")
        share = batch_size_of(batch) / self.batch_size
        loss, logs, total = None, {}, None
        for key, value in outputs.items():
            if key == "num_items" or not isinstance(value, torch.Tensor):
                continue
            value = value.mean() if value.ndim else value
            if key in items:
                weight = items[key].to(torch.float64) * self.shares / self.totals[key].clamp(min=1)
                weight = weight.to(value.dtype)
            else:
                weight = share
            weighted = value * weight
            logs[key] = weighted.detach()
            if "loss" in key:
                loss = weighted if loss is None else loss + weighted
                total = logs[key] if total is None else total + logs[key]
        if loss is None:
            raise TrainingError(f"In train mode {self.name} returned keys {sorted(outputs)}, none "
                                f"of which contains 'loss'.")
        logs["loss"] = total
        return (loss / self.divisor if self.divisor != 1 else loss).float(), logs


def merge_outputs(records: list[Any]) -> Any:
    """One batch's evaluation outputs from its microbatches': per-sample tensors concatenated,
    ``num_items`` summed, a 0-d loss averaged by its items (``num_items``) or its samples."""
    if not records:
        return None
    first = records[0]
    if not isinstance(first, Mapping):
        return torch.cat(records) if isinstance(first, torch.Tensor) and first.ndim else first
    sizes = [batch_size_of(r) for r in records]
    items = [r.get("num_items") or {} for r in records]
    out: dict[str, Any] = {}
    for key, value in first.items():
        values = [r[key] for r in records]
        if key == "num_items":
            out[key] = {k: sum(i[k] for i in items) for k in value}
        elif isinstance(value, torch.Tensor) and value.ndim:
            out[key] = torch.cat(values)
        elif isinstance(value, torch.Tensor):
            weights = [i[key] for i in items] if all(key in i for i in items) else sizes
            weights = torch.stack([torch.as_tensor(w, dtype=torch.float64) for w in weights])
            stacked = torch.stack(values).to(torch.float64)
            out[key] = ((stacked * weights).sum() / weights.sum().clamp(min=1)).to(value.dtype)
        else:
            out[key] = value
    return out


def batch_size_of(batch: Any) -> int:
    """The leading dimension of the first tensor with one."""
    for value in (batch.values() if isinstance(batch, Mapping) else [batch]):
        if isinstance(value, torch.Tensor) and value.ndim:
            return value.shape[0]
    return 1
