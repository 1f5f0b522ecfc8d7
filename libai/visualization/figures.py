"""How the log lines write numbers: ``key: value`` for a scalar, and the throughput figures of
ThroughputHook as a person reads them (``3,323 samples/s  7.12 TFLOP/s  MFU 41.2%``). Only the
text: the message hub, scalars.jsonl and TensorBoard keep the full values under their keys
(``train/samples_per_s``, ``train/tflops``, ``train/mfu``)."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["format_part", "format_value"]


def format_value(value: float) -> str:
    """4 decimals, or 4 in scientific notation for very small and very large values."""
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5) and math.isfinite(value):
        return f"{value:.4e}"
    return f"{value:.4f}"


def _rate(unit: str) -> Callable[[float], str]:
    # whole numbers with thousands separators from 100 on, 3 significant digits below
    return lambda v: f"{v:,.0f} {unit}" if abs(v) >= 100 else f"{v:.3g} {unit}"


def _flops_per_s(tflops: float) -> str:
    """3 significant digits with the SI prefix that fits: 7.12 TFLOP/s, 712 GFLOP/s."""
    value = tflops * 1e12
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}FLOP/s"
    return f"{value:.3g} FLOP/s"


_FIGURES: dict[str, Callable[[float], str]] = {
    "samples_per_s": _rate("samples/s"),
    "tokens_per_s": _rate("tokens/s"),
    "tflops": _flops_per_s,
    "mfu": lambda v: f"MFU {v * 100:.3g}%",
}


def format_part(key: str, value: float) -> str:
    """One part of a log line: a throughput figure as a person reads it (``3,323 samples/s``),
    anything else (and a figure that is not finite) as ``key: value``."""
    figure = _FIGURES.get(key)
    if figure is not None and math.isfinite(value):
        return figure(value)
    return f"{key}: {format_value(value)}"
