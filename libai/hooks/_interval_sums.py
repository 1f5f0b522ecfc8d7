"""The log interval: when its line is due (LoggerHook's rule, which ThroughputHook follows), and
the values LoggerHook averages over it, kept as logged and read once at its end."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["RunningSum", "iterations_to_log"]


def iterations_to_log(it: int, batch_idx: int, interval: int, max_iters: int,
                      by_epoch: bool = False, per_epoch: int | None = None) -> int:
    """From iteration ``it`` (0-based, not done; ``batch_idx`` within its epoch), the iterations
    until a line is due: at multiples of ``interval`` (within the epoch for epoch loops), at an
    epoch's end (``per_epoch`` iterations), and at ``max_iters`` (where this run stops)."""
    if by_epoch:
        n = interval - batch_idx % interval
        if per_epoch:
            n = min(n, per_epoch - batch_idx)
    else:
        n = interval - it % interval
    return max(1, min(n, max_iters - it))


class RunningSum:
    """The logged values of the current interval, kept as given until read.

    Per iteration this only appends the step's ``outputs`` (detached 0-d tensors on their
    device, or numbers), so logging costs no kernel launch and no device sync per iteration.
    Reading the means reads CPU scalars one by one (cheaper than a kernel on the CPU) and stacks
    each accelerator key once, with one transfer for all. Memory is bounded by the log interval.
    A key missing from some iterations is averaged over the iterations that had it.
    """

    def __init__(self) -> None:
        self.rows: list[Any] = []

    @property
    def iterations(self) -> int:
        return len(self.rows)

    def reset(self) -> None:
        self.rows = []

    def means(self) -> dict[str, float]:
        """Averages since the last reset, as Python floats (at most one device read)."""
        per_key = _by_key(self.rows)
        out: dict[str, float] = {}
        on_device: dict[str, torch.Tensor] = {}
        with torch.no_grad():  # a custom train_step may log tensors that require grad
            for key, values in per_key.items():
                mean = _cpu_mean(values)
                if mean is None:
                    on_device[key] = _mean(values)
                else:
                    out[key] = mean
            if on_device:  # one stack and one transfer for all keys
                device = next(iter(on_device.values())).device
                stacked = torch.stack([t.to(device) for t in on_device.values()]).tolist()
                out.update(zip(on_device, stacked))
        return {key: out[key] for key in per_key}


def _by_key(rows: list[Any]) -> dict[str, list[Any]]:
    """``{key: [its values, in row order]}`` over the dict rows; a key missing from some rows
    has fewer values."""
    first = rows[0] if rows else None
    if type(first) is dict:  # the usual case: every step logs the same keys
        n = len(first)
        if all(type(row) is dict and len(row) == n for row in rows):
            try:
                return {key: [row[key] for row in rows] for key in first}
            except KeyError:  # same sizes, other keys
                pass
    per_key: dict[str, list[Any]] = {}
    for row in rows:
        if isinstance(row, (dict, Mapping)):
            for key, value in row.items():
                bucket = per_key.get(key)
                if bucket is None:
                    bucket = per_key[key] = []
                bucket.append(value)
    return per_key


def _cpu_mean(values: list[Any]) -> float | None:
    """Mean of CPU scalars read one by one (cheaper than a stack there), or None otherwise."""
    first = values[0]
    if not isinstance(first, torch.Tensor) or not first.is_cpu:
        return None
    try:
        return sum([v.item() for v in values]) / len(values)
    except (AttributeError, RuntimeError):  # numbers mixed in, or tensors of several elements
        return None


def _mean(values: list[Any]) -> torch.Tensor:
    """Mean of one key's values: one stack for the usual same-shape tensors on one device.

    Not checked value by value first: inspecting 50 tensors costs more than the stack itself.
    Same-shape tensors average to the mean of their means; anything else takes the slow path.
    """
    try:
        return torch.stack(values).float().mean()
    except (TypeError, RuntimeError):  # numbers, mixed shapes or devices
        items = [v.detach().float().mean() if isinstance(v, torch.Tensor) else torch.tensor(float(v))
                 for v in values]
        return torch.stack([t.to(items[0].device) for t in items]).mean()
