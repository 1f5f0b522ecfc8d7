"""Curves of runs' scalars: :func:`plot_curve`, one subplot per key and one curve per run."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from .logs_read import LogError, Run, as_runs

__all__ = ["plot_curve"]

FORMATS = (".png", ".svg", ".pdf")


def _smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average over ``window`` points (fewer at the start)."""
    if window <= 1:
        return list(values)
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_curve(
    runs: Sequence[Run | str | os.PathLike],
    keys: Sequence[str] = ("train/loss",),
    x: str = "step",
    smooth: int = 1,
    log_scale: bool = False,
    legend: Sequence[str] | None = None,
    title: str | None = None,
    out: str | os.PathLike | None = None,
) -> Any:
    """Draw one subplot per key with one curve per run; save it to ``out`` if given.

    Args:
        runs: :class:`Run` objects from :func:`load_runs`, or their paths.
        keys: Scalar keys, e.g. ``train/loss``, ``val/accuracy``. Defaults to ('train/loss',).
        x: ``'step'`` (train iterations) or ``'epoch'`` (step / iterations per epoch, from the
            training log). Defaults to 'step'.
        smooth: Moving-average window in logged points (not iterations): each point becomes the
            mean of itself and the ``smooth - 1`` points before it (fewer at the start).
            1 draws the values as logged. Defaults to 1.
        log_scale: Logarithmic y axes. Defaults to False.
        legend: One name per run, instead of the runs' names. Defaults to None.
        title: The figure's title. Defaults to None.
        out: A ``.png``, ``.svg`` or ``.pdf`` path to save to (its folder is created). Defaults
            to None: not saved.

    Returns:
        The matplotlib ``Figure`` (object API, no pyplot: nothing stays registered).

    Raises:
        LogError: A run lacks a key (the message lists the keys it has), no iterations per
            epoch are known for ``x='epoch'``, or ``out`` has another extension.
    """
    if x not in ("step", "epoch"):
        raise LogError(f"x must be 'step' or 'epoch', got {x!r}.")
    if int(smooth) != smooth or smooth < 1:
        raise LogError(f"smooth is a moving-average window of at least 1 point, got {smooth!r}")
    if out is not None and os.path.splitext(os.fspath(out))[1].lower() not in FORMATS:
        raise LogError(f"--out {os.fspath(out)}: the file name must end in "
                       f"{', '.join(FORMATS)}")
    keys = list(keys) or ["train/loss"]
    runs = as_runs(runs, legend)
    for run in runs:  # every error before any drawing
        for key in keys:
            run.require(key)
        if x == "epoch" and not run.iters_per_epoch:
            raise LogError(f"run '{run.name}': iterations per epoch unknown (no training log with "
                           f"a 'Derived: iterations per epoch' line next to {run.files[0]}); "
                           f"use --x step")
    fig = _figure(runs, keys, x, smooth, log_scale, title)
    if out is not None:
        out = os.fspath(out)
        if os.path.dirname(out):
            os.makedirs(os.path.dirname(out), exist_ok=True)
        fig.savefig(out, dpi=100)
    return fig


def _figure(runs: list[Run], keys: list[str], x: str, smooth: int, log_scale: bool,
            title: str | None) -> Any:
    """The Figure of :func:`plot_curve`, its arguments checked."""
    from matplotlib.figure import Figure

    ncols = 1 if len(keys) == 1 else 2 if len(keys) <= 4 else 3
    nrows = math.ceil(len(keys) / ncols)
    fig = Figure(figsize=(6.4 * ncols if ncols > 1 else 7, 4 * nrows), layout="constrained")
    for k, key in enumerate(keys):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        for i, run in enumerate(runs):
            steps, values = run.series[key]
            xs = [s / run.iters_per_epoch for s in steps] if x == "epoch" else steps
            sparse = len(steps) < 30
            # the gid marks the curve in an SVG: <g id="curve_<key index>_<run index>">
            ax.plot(xs, _smooth(values, int(smooth)), label=run.name, color=f"C{i % 10}",
                    marker="o" if sparse else None, markersize=3, gid=f"curve_{k}_{i}")
        ax.set_title(key + (f" (moving average of {int(smooth)})" if smooth > 1 else ""))
        ax.set_xlabel("iteration" if x == "step" else "epoch")
        if log_scale:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    return fig
