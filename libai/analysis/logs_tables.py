"""Printing the numbers of runs: rich tables of iteration times and summaries, their notes, and
the notes of reading runs."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

from .logs_read import Run, RunSummary, TrainTime

__all__ = [
    "SUMMARY_NOTE",
    "TRAIN_TIME_NOTE",
    "print_notes",
    "print_table",
    "summary_table",
    "train_time_table",
]


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if v != v or math.isinf(v):
        return str(v)
    return f"{v:.4g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.3e}"


def _duration(seconds: float | None) -> str:
    """One format for every length, ``h:mm:ss.s`` (as the log lines' ``eta``, with tenths for
    short runs): ``0:00:02.5``, ``0:02:43.0``, ``12:00:00.0``."""
    if seconds is None:
        return "-"
    if seconds != seconds or math.isinf(seconds):
        return str(seconds)
    tenths = int(round(seconds * 10))
    s, tenth = divmod(tenths, 10)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}.{tenth}"


TRAIN_TIME_NOTE = (
    "avg: the mean iteration time, weighted by the iterations each logged row covers; slowest, "
    "fastest: the slowest and fastest log interval (@ its last iteration; the first includes "
    "the warm-up); data time: the share of data_time in the iteration time; train time: the "
    "sum of the iteration times (no validation, no start-up).")
SUMMARY_NOTE = (
    "best: the max of accuracy-like keys, the min of loss-like ones (the rule of CheckpointHook "
    "save_best='auto'; 'rule?': the name says neither); @N: at iteration N; train time: the "
    "sum of the logged iteration times (no validation, no start-up).")


def print_table(table: Any, note: str) -> None:
    """Print a rich table and its note; at the table's natural width when stdout is not a
    terminal (a pipe or a file), so that no column is cut."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        width = console.measure(table, options=console.options.update_width(1000)).maximum
        console = Console(width=max(width, 80), no_color=True)
    console.print(table)
    console.print(note, style="dim", highlight=False)


def train_time_table(times: dict[str, TrainTime]) -> Any:
    from rich.table import Table

    table = Table(title="Iteration time (s), from train/time per log interval")
    for col in ("run", "iterations", "avg", "slowest", "fastest", "data time", "train time"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for name, t in times.items():
        share = "-" if t.data_time_share is None else f"{t.data_time_share:.1%}"
        table.add_row(name, str(t.iterations), f"{t.mean:.4f}",
                      f"{t.slowest:.4f} @{t.slowest_step}", f"{t.fastest:.4f} @{t.fastest_step}",
                      share, _duration(t.total))
    return table


def summary_table(summaries: dict[str, RunSummary]) -> Any:
    from rich.table import Table

    table = Table(title="Summary")
    table.add_column("metric")
    table.add_column("")
    for name in summaries:
        table.add_column(name, justify="right")
    keys = sorted({k for s in summaries.values() for k in s.metrics},
                  key=lambda k: (not k.startswith("val/"), not k.startswith("test/"), k))
    for key in keys:
        ms = [s.metrics.get(key) for s in summaries.values()]
        rule = next((m.rule for m in ms if m is not None), None)
        best = [("-" if m is None or m.best is None else f"{_fmt(m.best)} @{m.best_step}")
                for m in ms]
        last = ["-" if m is None else f"{_fmt(m.last)} @{m.last_step}" for m in ms]
        table.add_row(key, f"best ({rule})" if rule else "best (rule?)", *best)
        table.add_row("", "last", *last, end_section=True)
    table.add_row("iterations", "",
                  *["-" if s.iterations is None else str(s.iterations) for s in summaries.values()])
    table.add_row("train time", "", *[_duration(s.train_time) for s in summaries.values()])
    return table


def print_notes(runs: Sequence[Run]) -> None:
    """Print each run's notes (older runs left out...) to stderr as ``note: <run>: <note>``."""
    for run in runs:
        for note in run.notes:
            print(f"note: {run.name}: {note}", file=sys.stderr)
