"""PNG plots of a run's scalars, drawn from its scalars.jsonl at the end of the run."""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict

__all__ = ["plot_scalars", "family_of"]


def family_of(tag: str) -> str:
    """The plot a tag goes to: all losses together, all lrs, the two timers, else one per tag."""
    leaf = tag.rsplit("/", 1)[-1]
    if "loss" in leaf and not leaf.startswith("loss_scale"):
        return "loss"
    if tag.startswith("train/"):
        if leaf.startswith("lr"):
            return "lr"
        if leaf in ("time", "data_time"):
            return "time"
        return leaf
    return re.sub(r"[^0-9A-Za-z_.-]+", "_", tag)


def _read(path: str) -> dict[str, tuple[list[int], list[float]]]:
    series: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
                step = int(row["step"])
            except (ValueError, KeyError, TypeError):
                continue
            for tag, value in row.items():
                if tag in ("step", "epoch") or not isinstance(value, int | float):
                    continue
                steps, values = series[tag]
                steps.append(step)
                values.append(float(value))
    return dict(series)


def plot_scalars(jsonl_path: str, out_dir: str) -> list[str]:
    """Write one PNG per scalar family of ``jsonl_path`` into ``out_dir``.

    Families: ``loss`` (train and validation losses), ``lr``, ``time`` (time and data_time),
    and one plot for every other tag (``grad_norm``, ``val_accuracy`` ...). The x axis is the
    train iteration. Uses matplotlib's object API with the Agg canvas, so the process's pyplot
    backend (a notebook's, say) is left alone.

    Returns:
        The paths written, sorted.
    """
    series = _read(jsonl_path)
    if not series:
        return []
    from matplotlib.figure import Figure

    families: dict[str, list[str]] = defaultdict(list)
    for tag in series:
        families[family_of(tag)].append(tag)
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for family, tags in sorted(families.items()):
        fig = Figure(figsize=(7, 4), layout="constrained")
        ax = fig.subplots()
        for tag in sorted(tags):
            steps, values = series[tag]
            sparse = len(steps) < 50 or not tag.startswith("train/")
            ax.plot(steps, values, label=tag, marker="o" if sparse else None, markersize=3)
        ax.set_title(family)
        ax.set_xlabel("iteration")
        ax.grid(True, alpha=0.3)
        if len(tags) > 1:
            ax.legend()
        path = os.path.join(out_dir, f"{family}.png")
        fig.savefig(path, dpi=100)
        written.append(path)
    return sorted(written)
