"""PNG plots of a run's scalars, drawn from its scalars.jsonl at the end of the run: one overview
page (``overview.png``) and one PNG per scalar family.

Also a script: ``python plots.py SCALARS_JSONL OUT_DIR [LOG_FILE]`` draws them and appends the
"Saved ..." line to LOG_FILE. The LoggerHook runs it as a background process
(:func:`draw_in_background`), so that matplotlib (about 0.3 s to import, 0.1 s a page) works
while the run's test and teardown go on, and the run's memory never holds it. The process that
started it waits for it before exiting (at most :data:`EXIT_WAIT_S`, then it stops it and says
so): nothing in the work dir changes once the run's process has exited. The script stops by
itself, writing nothing more, when the process that started it is gone (killed, say). It imports
nothing but the standard library and matplotlib: run as a file, it does not import torch or
libai.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections import defaultdict
from typing import Any

__all__ = ["EXIT_WAIT_S", "OVERVIEW", "draw_in_background", "family_of", "finish_plots",
           "overview_figure", "overview_panels", "plot_scalars", "saved_message"]

OVERVIEW = "overview.png"
#: How long a process waits at exit for the plot processes it started.
EXIT_WAIT_S = 60.0
Series = dict[str, tuple[list[int], list[float]]]


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


def _read(path: str) -> Series:
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


def overview_panels(series: Series) -> list[tuple[str, list[str]]]:
    """The overview's subplots as ``(title, tags)``, only those with data, in this order:

    ``loss`` (every train and validation loss), ``lr``, one per validation metric (each has its
    own scale), ``iteration time (s)`` (time and data_time). Test scalars, ``grad_norm`` and the
    other training scalars are left to their own PNGs.
    """
    families = {tag: family_of(tag) for tag in series if not tag.startswith("test/")}
    panels = []
    for title, family in (("loss", "loss"), ("lr", "lr")):
        tags = sorted(t for t, f in families.items() if f == family)
        if tags:
            panels.append((title, tags))
    panels += [(t, [t]) for t in sorted(families) if t.startswith("val/") and families[t] != "loss"]
    times = sorted(t for t, f in families.items() if f == "time")
    if times:
        panels.append(("iteration time (s)", times))
    return panels


def _draw(ax: Any, series: Series, tags: list[str], title: str) -> None:
    for tag in tags:
        steps, values = series[tag]
        sparse = len(steps) < 50 or not tag.startswith("train/")
        ax.plot(steps, values, label=tag, marker="o" if sparse else None, markersize=3)
    ax.set_title(title)
    ax.set_xlabel("iteration")
    ax.grid(True, alpha=0.3)
    if len(tags) > 1:
        ax.legend(fontsize="small")


def overview_figure(series: Series) -> Any:
    """One matplotlib Figure with a subplot per :func:`overview_panels` entry, or None if none.

    Uses the object API (no pyplot), so nothing stays registered once the figure is dropped.
    """
    panels = overview_panels(series)
    if not panels:
        return None
    from matplotlib.figure import Figure

    ncols = 1 if len(panels) == 1 else 2 if len(panels) <= 4 else 3
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(5 * ncols, 3.2 * nrows), layout="constrained")
    for i, (title, tags) in enumerate(panels):
        _draw(fig.add_subplot(nrows, ncols, i + 1), series, tags, title)
    return fig


def plot_scalars(jsonl_path: str, out_dir: str) -> list[str]:
    """Write ``overview.png`` and one PNG per scalar family of ``jsonl_path`` into ``out_dir``.

    The overview is one page of subplots (see :func:`overview_panels`). Families: ``loss``
    (train and validation losses), ``lr``, ``time`` (time and data_time), and one plot for
    every other tag (``grad_norm``, ``val_accuracy`` ...). The x axis is the train iteration.
    Uses matplotlib's object API with the Agg canvas, so the process's pyplot backend (a
    notebook's, say) is left alone.

    Returns:
        The paths written: the overview first (if any panel has data), then the others sorted.
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
        _draw(fig.subplots(), series, sorted(tags), family)
        # a tag named 'overview' must not overwrite the overview page
        name = f"{family}_scalar.png" if f"{family}.png" == OVERVIEW else f"{family}.png"
        path = os.path.join(out_dir, name)
        _save(fig, path)
        written.append(path)
    fig = overview_figure(series)
    if fig is None:
        return sorted(written)
    path = os.path.join(out_dir, OVERVIEW)
    _save(fig, path)
    return [path] + sorted(written)


def _save(fig: Any, path: str) -> None:
    """Write the PNG under a temporary name, then rename: a reader (or a second plot process,
    e.g. the test run's after the training run's) never sees half a file. A plot process stopped
    while saving (SIGTERM: superseded, or not done when its run exits) removes its temporary."""
    tmp = f"{path}.tmp-{os.getpid()}.png"
    try:
        fig.savefig(tmp, dpi=100)
        _stop_if_orphaned()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


_PARENT: int | None = None  # as a script: the run's process, which waits for this one


def _stop_if_orphaned() -> None:
    """As a script: end, writing nothing more, once the run that started this process is gone
    (it waits for its plots before exiting, so it was killed): its work dir is left alone."""
    if _PARENT is not None and os.getppid() != _PARENT:
        raise SystemExit(3)


def saved_message(paths: list[str]) -> str:
    """The log line for what :func:`plot_scalars` wrote (non-empty ``paths``)."""
    overview = os.path.basename(paths[0]) == OVERVIEW
    first = f"{OVERVIEW} and " if overview else ""
    return f"Saved {first}{len(paths) - overview} plot(s) in {os.path.dirname(paths[0])}"


# this process's plot processes and their logs: process-wide, as the exit that waits for them
_STARTED: list[tuple[Any, str | None]] = []
_WAITS_AT_EXIT = [False]


def draw_in_background(jsonl_path: str, out_dir: str, log_file: str | None = None) -> Any:
    """Run this file as a script (:func:`plot_scalars`, then the "Saved ..." line appended to
    ``log_file``) in a process of its own, in a new session: a Ctrl-C at the terminal does not
    cut a PNG short. This process waits for it before it exits (:func:`finish_plots`). Returns
    its ``subprocess.Popen``; raises OSError if it cannot start."""
    import atexit
    import subprocess

    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), jsonl_path, out_dir,
         *([log_file] if log_file else [])],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    if not _WAITS_AT_EXIT[0]:
        atexit.register(finish_plots)
        _WAITS_AT_EXIT[0] = True
    _STARTED[:] = [(p, f) for p, f in _STARTED if p.poll() is None] + [(proc, log_file)]
    return proc


def finish_plots(timeout: float | None = None) -> None:
    """Wait for the plot processes this process started, ``timeout`` seconds at most
    (:data:`EXIT_WAIT_S` by default); stop those still drawing then (SIGTERM: they remove their
    temporary files), with one line on stderr and in their run's log. Run at exit, so that the
    work dir is final once the run's process is gone; a Ctrl-C while waiting stops them too."""
    import subprocess
    import time

    limit = EXIT_WAIT_S if timeout is None else timeout
    deadline = time.monotonic() + limit
    started, _STARTED[:] = list(_STARTED), []
    for proc, log_file in started:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            continue
        except subprocess.TimeoutExpired:
            reason = f"not finished {limit:g} s after the run ended"
        except KeyboardInterrupt:
            reason = "interrupted (Ctrl-C) while the run waited for them"
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        args = proc.args
        message = (f"LoggerHook: stopped drawing the plots ({reason}), so that nothing is written "
                   f"after the run. Draw them with: python {args[1]} {args[2]} {args[3]}")
        print(message, file=sys.stderr)
        _append(log_file, "WARNING", message)


def _append(log_file: str | None, level: str, message: str) -> None:
    import datetime

    if log_file:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
        with open(log_file, "a", encoding="utf-8") as f:
            f.write(f"{stamp} - libai - {level} - {message}\n")


def _main(argv: list[str]) -> int:
    import signal

    global _PARENT
    _PARENT = os.getppid()
    # stopped (superseded, or its run exits first): end through finally, removing temporaries
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    jsonl_path, out_dir = argv[0], argv[1]
    log_file = argv[2] if len(argv) > 2 else None
    try:
        paths = plot_scalars(jsonl_path, out_dir)
        message, level = (saved_message(paths) if paths else None), "INFO"
    except Exception as e:  # noqa: BLE001 - reported in the run's log, never raised
        message, level = f"LoggerHook: could not draw the plots ({type(e).__name__}: {e}).", "WARNING"
    _stop_if_orphaned()
    if message:
        _append(log_file, level, message)
    return 0 if level == "INFO" else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
