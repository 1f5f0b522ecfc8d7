"""Read the scalar logs (``scalars.jsonl``) of one or more runs: curves, iteration times, a summary.

    libai analyze-logs plot_curve RUN [RUN ...] [--keys train/loss val/accuracy]
        [--x step|epoch] [--smooth N] [--log-scale] [--legend NAME ...] [--title T] --out FILE
    libai analyze-logs cal_train_time RUN [RUN ...]
    libai analyze-logs summary RUN [RUN ...]

(or ``python tools/analyze_logs.py ...``; the command line is :mod:`libai.cli.analyze_logs`.)

A RUN is a work dir (``work_dirs/digits_mlp``) or one ``scalars.jsonl`` file. In a work dir,
each run has a timestamped run folder, ``WORK_DIR/<YYYYmmdd_HHMMSS>/``: a fresh training writes its
training, validation and test scalars into its own folder's ``scalars.jsonl``, a resumed training
continues that file, and ``tools/test.py`` writes into its own folder. Given a work dir, the tool
reads the newest training (the newest fresh, not resumed, training run, found from the run
folders' logs) and the run folders after it, oldest first; older runs are left out with a note
(pass their ``scalars.jsonl`` to read one of them). Where two files give the same key at the same
step, the newer wins. Work dirs of older libai versions (``WORK_DIR/scalars.jsonl``) read too.

From Python (run names default to the work dir's name)::

    from libai.analysis import cal_train_time, load_runs, plot_curve, summary
    runs = load_runs(["work_dirs/a", "work_dirs/b"])
    fig = plot_curve(runs, keys=["train/loss", "val/accuracy"], out="curves.png")
    times = cal_train_time(runs)        # {name: TrainTime}
    table = summary(runs)               # {name: RunSummary}

Bad input (a missing path, a folder without ``scalars.jsonl``, an unknown key) is one line,
``error: ...``, and exit status 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from libai.utils.errors import LibaiError
from libai.utils.suggest import did_you_mean

__all__ = [
    "LogError",
    "Run",
    "RunSummary",
    "TrainTime",
    "better_rule",
    "cal_train_time",
    "load_runs",
    "print_notes",
    "print_table",
    "summary_table",
    "train_time_table",
    "SUMMARY_NOTE",
    "TRAIN_TIME_NOTE",
    "plot_curve",
    "summary",
]

SCALARS = "scalars.jsonl"
FORMATS = (".png", ".svg", ".pdf")
# the Runner's time.strftime("%Y%m%d_%H%M%S"), "_2" ... for runs started in the same second
_RUN_FOLDER = re.compile(r"^\d{8}_\d{6}(_\d+)?$")
_DERIVED = re.compile(r"Derived: iterations per epoch (\d+)")
_LOG_SCAN_LINES = 2000  # the start-up lines of a run log, where "Derived" and "Resumed" are

# Which direction is better, by the lower-cased last part of the key: the words that
# CheckpointHook(save_best='auto') and EarlyStoppingHook use; "lower" is tried first, so that
# "top1_error" is an error. tests/tools/test_analyze_logs.py checks that the two agree.
_LOWER_WORDS = ("loss", "error", "err", "perplexity", "ppl", "mse", "mae", "rmse", "nll", "wer",
                "cer")
_HIGHER_WORDS = ("acc", "precision", "recall", "f1", "map", "auc", "iou", "dice", "bleu", "rouge",
                 "top", "psnr", "ssim", "score", "r2")


class LogError(LibaiError):
    """A run's logs cannot be found or read, or lack what was asked for."""


Series = tuple[list[int], list[float]]  # (steps, values), steps ascending


@dataclass
class Run:
    """The scalars of one run.

    Attributes:
        name: The name in legends and tables: the work dir's name, or the one given.
        path: The path as given.
        files: The ``scalars.jsonl`` files read, in the order they were merged.
        series: ``{key: (steps, values)}``, steps ascending, one value per step.
        iters_per_epoch: From the training log ("Derived: iterations per epoch N"), or None.
        notes: What was skipped or assumed while reading (printed by the command line).
    """

    name: str
    path: str
    files: list[str]
    series: dict[str, Series]
    iters_per_epoch: int | None = None
    notes: list[str] = field(default_factory=list)

    def keys(self) -> list[str]:
        return sorted(self.series)

    def last_step(self) -> int | None:
        """The last training iteration logged (the largest step of a ``train/`` key)."""
        steps = [s[-1] for k, (s, _) in self.series.items() if k.startswith("train/") and s]
        return max(steps) if steps else None

    def require(self, key: str) -> Series:
        """``series[key]``, or a LogError naming the keys this run does have."""
        if key in self.series:
            return self.series[key]
        raise LogError(
            f"run '{self.name}' ({self.path}) has no key '{key}'.{did_you_mean(key, self.series)} "
            f"Its keys: {', '.join(self.keys()) or 'none'}."
        )


@dataclass
class TrainTime:
    """Iteration times of a run, from its ``train/time`` rows (each the mean iteration time of
    one log interval; a row covers the iterations since the previous row)."""

    iterations: int
    mean: float  # seconds per iteration, weighted by the iterations each row covers
    slowest: float  # the slowest logged interval's mean iteration time
    slowest_step: int
    fastest: float
    fastest_step: int
    data_time_share: float | None  # sum(data_time * n) / sum(time * n); None without data_time
    total: float  # sum(time * n): the iterations' time, without validation and start-up


@dataclass
class MetricSummary:
    best: float | None  # None when the rule is unknown or no value is finite
    best_step: int | None
    last: float
    last_step: int
    rule: str | None  # "max", "min", or None: unknown direction


@dataclass
class RunSummary:
    metrics: dict[str, MetricSummary]
    iterations: int | None
    train_time: float | None  # TrainTime.total


# ------------------------------------------------------------------------------------ reading
def _read_rows(path: str) -> tuple[list[dict[str, Any]], int]:
    """The rows with a step, and the number of lines that were not such a row."""
    rows, bad = [], 0
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise LogError(f"cannot read {path}: {e.strerror or e}") from e
    with f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                row["step"] = int(row["step"])
            except (ValueError, KeyError, TypeError):  # a line cut short by a killed process
                bad += 1
                continue
            rows.append(row)
    return rows, bad


def _log_info(folder: str) -> tuple[bool, bool, int | None]:
    """From a run folder's log: (is a training run, was resumed, iterations per epoch)."""
    training = resumed = False
    per_epoch = None
    try:
        logs = sorted(f for f in os.listdir(folder) if f.endswith(".log"))
        for name in logs:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                for i, line in enumerate(f):
                    m = _DERIVED.search(line)
                    if m:
                        training, per_epoch = True, int(m.group(1))
                    elif "Resumed from " in line:
                        resumed = True
                    elif "Iter [" in line or "Epoch [" in line or i >= _LOG_SCAN_LINES:
                        break
    except OSError:  # an unreadable log tells nothing: the folder counts as not training
        pass
    return training, resumed, per_epoch


def _run_folders(folder: str) -> list[str]:
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, n) for n in sorted(names)
            if _RUN_FOLDER.match(n) and os.path.isdir(os.path.join(folder, n))]


def _sources(path: str) -> tuple[list[str], int | None, list[str]]:
    """The scalars.jsonl files of RUN ``path``, oldest first, its iterations per epoch, notes."""
    if not os.path.exists(path):
        raise LogError(f"{path}: no such file or directory (a RUN is a work dir or a {SCALARS})")
    if os.path.isfile(path):
        folder = os.path.dirname(os.path.abspath(path))
        candidates = [folder, *_run_folders(folder)]
        per_epoch = None
        for c in candidates:
            per_epoch = _log_info(c)[2] or per_epoch
        return [path], per_epoch, []
    top = os.path.join(path, SCALARS)
    folders = _run_folders(path)
    infos = {f: _log_info(f) for f in folders}
    fresh = [f for f in folders if infos[f][0] and not infos[f][1]]
    notes = []
    if fresh:  # the current training began in the newest fresh training run folder
        start = folders.index(fresh[-1])
        old = [f for f in folders[:start] if os.path.isfile(os.path.join(f, SCALARS))]
        if old:
            notes.append(f"left out {len(old)} run folder(s) older than the current training "
                         f"(started in {os.path.basename(fresh[-1])}): "
                         + ", ".join(os.path.basename(f) for f in old))
        folders = folders[start:]
    files = [top] if os.path.isfile(top) else []
    files += [os.path.join(f, SCALARS) for f in folders if os.path.isfile(os.path.join(f, SCALARS))]
    if not files:
        nested = sorted(n for n in os.listdir(path)  # work dirs: scalars in them or their runs
                        if any(os.path.isfile(os.path.join(f, SCALARS))
                               for f in [os.path.join(path, n), *_run_folders(os.path.join(path, n))]))
        hint = (f" It holds the work dirs {', '.join(nested)}: pass them "
                f"(e.g. {os.path.join(path, nested[0])})." if nested else
                f" Training writes WORK_DIR/<run folder>/{SCALARS}: is this a libai work dir?")
        raise LogError(f"{path}: no {SCALARS} in it or in its run folders.{hint}")
    per_epoch = None
    for f in folders:
        if infos[f][2]:
            per_epoch = infos[f][2]
    return files, per_epoch, notes


def _load(path: str, name: str) -> Run:
    files, per_epoch, notes = _sources(path)
    merged: dict[str, dict[int, float]] = {}
    for file in files:
        rows, bad = _read_rows(file)
        if bad:
            notes.append(f"skipped {bad} unreadable line(s) of {file}")
        for row in rows:
            step = row["step"]
            for key, value in row.items():
                if key in ("step", "epoch") or isinstance(value, bool):
                    continue
                if isinstance(value, int | float):
                    merged.setdefault(key, {})[step] = float(value)  # a newer file wins
    if not merged:
        raise LogError(f"{path}: no scalars in {', '.join(files)} (an empty log: did the run "
                       f"reach its first log interval?)")
    series = {k: (sorted(v), [v[s] for s in sorted(v)]) for k, v in merged.items()}
    return Run(name=name, path=path, files=files, series=series, iters_per_epoch=per_epoch,
               notes=notes)


def _default_name(path: str) -> str:
    p = os.path.abspath(path)
    if os.path.isfile(p):
        p = os.path.dirname(p)
    base = os.path.basename(p)
    if _RUN_FOLDER.match(base):  # a run folder: say whose
        return f"{os.path.basename(os.path.dirname(p))}/{base}"
    return base


def _unique(names: list[str], paths: list[str]) -> list[str]:
    """Names made unique: the path as given where two runs share a name."""
    out = [p if names.count(n) > 1 else n for n, p in zip(names, paths)]
    seen: dict[str, int] = {}
    for i, n in enumerate(out):
        seen[n] = seen.get(n, 0) + 1
        if seen[n] > 1:
            out[i] = f"{n} #{seen[n]}"
    return out


def load_runs(paths: Sequence[str | os.PathLike], names: Sequence[str] | None = None) -> list[Run]:
    """Read each RUN (a work dir or a ``scalars.jsonl`` file); see the module docstring.

    Args:
        paths: Work dirs or ``scalars.jsonl`` files.
        names: One name per run for legends and tables. Defaults to None: the work dir's name
            (made unique with the path where two runs share it).

    Raises:
        LogError: A path is missing, holds no ``scalars.jsonl``, or ``names`` has another
            length than ``paths``.
    """
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise LogError("no RUN given: pass work dirs or scalars.jsonl files")
    if names is not None and len(names) != len(paths):
        raise LogError(f"{len(names)} legend name(s) for {len(paths)} run(s): give one per run")
    names = list(names) if names is not None else _unique([_default_name(p) for p in paths], paths)
    return [_load(p, n) for p, n in zip(paths, names)]


def _as_runs(runs: Sequence[Run | str | os.PathLike], names: Sequence[str] | None = None
             ) -> list[Run]:
    if all(isinstance(r, Run) for r in runs):
        runs = list(runs)
        if names is not None:
            if len(names) != len(runs):
                raise LogError(f"{len(names)} legend name(s) for {len(runs)} run(s): give one "
                               f"per run")
            runs = [Run(n, r.path, r.files, r.series, r.iters_per_epoch, r.notes)
                    for n, r in zip(names, runs)]
        return runs
    if any(isinstance(r, Run) for r in runs):
        raise TypeError("pass either Run objects or paths, not both")
    return load_runs(runs, names)


# ------------------------------------------------------------------------------------ plot_curve
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
    runs = _as_runs(runs, legend)
    for run in runs:  # every error before any drawing
        for key in keys:
            run.require(key)
        if x == "epoch" and not run.iters_per_epoch:
            raise LogError(f"run '{run.name}': iterations per epoch unknown (no training log with "
                           f"a 'Derived: iterations per epoch' line next to {run.files[0]}); "
                           f"use --x step")

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
    if out is not None:
        out = os.fspath(out)
        if os.path.dirname(out):
            os.makedirs(os.path.dirname(out), exist_ok=True)
        fig.savefig(out, dpi=100)
    return fig


# -------------------------------------------------------------------------------- cal_train_time
def _train_time(run: Run) -> TrainTime:
    steps, times = run.require("train/time")
    data = dict(zip(*run.series["train/data_time"])) if "train/data_time" in run.series else {}
    total = data_total = 0.0
    prev = 0
    covered = []
    for step, t in zip(steps, times):
        n = max(step - prev, 0)
        prev = step
        covered.append(n)
        total += t * n
        if step in data:
            data_total += data[step] * n
    iterations = sum(covered)
    slow = max(range(len(times)), key=lambda i: times[i])
    fast = min(range(len(times)), key=lambda i: times[i])
    has_data = bool(data) and all(s in data for s in steps)
    return TrainTime(
        iterations=iterations,
        mean=total / iterations if iterations else float("nan"),
        slowest=times[slow], slowest_step=steps[slow],
        fastest=times[fast], fastest_step=steps[fast],
        data_time_share=data_total / total if has_data and total > 0 else None,
        total=total,
    )


def cal_train_time(runs: Sequence[Run | str | os.PathLike]) -> dict[str, TrainTime]:
    """Per run, the average, slowest and fastest iteration time and the data time share.

    From the ``train/time`` and ``train/data_time`` rows: each is the mean over one log
    interval, and covers the iterations since the previous row (the step difference). So the
    average is weighted by those iterations, and slowest/fastest are the slowest and fastest
    logged intervals (the first includes the warm-up).

    Returns:
        ``{run name: TrainTime}``, in the order of ``runs``.

    Raises:
        LogError: A run has no ``train/time`` (the IterTimerHook was removed?).
    """
    return {run.name: _train_time(run) for run in _as_runs(runs)}


# ---------------------------------------------------------------------------------- summary
def better_rule(key: str) -> str | None:
    """``'min'`` for loss-like keys (loss, error, perplexity, ...), ``'max'`` for accuracy-like
    ones (acc, precision, f1, bleu, ...), None if the name says neither: the words of
    ``CheckpointHook(save_best='auto')``, matched in the lower-cased last part of the key."""
    leaf = key.rsplit("/", 1)[-1].lower()
    if any(w in leaf for w in _LOWER_WORDS):
        return "min"
    if any(w in leaf for w in _HIGHER_WORDS):
        return "max"
    return None


def summary_keys(run: Run) -> list[str]:
    """The keys a summary shows: validation and test metrics, and ``train/loss``."""
    return sorted(k for k in run.series
                  if k.startswith(("val/", "test/")) or k == "train/loss")


def _metric(steps: list[int], values: list[float], rule: str | None) -> MetricSummary:
    best = best_step = None
    finite = [(v, s) for s, v in zip(steps, values) if math.isfinite(v)]
    if rule and finite:
        # the first step that reaches the best value
        pick = max if rule == "max" else min
        best = pick(v for v, _ in finite)
        best_step = next(s for v, s in finite if v == best)
    return MetricSummary(best=best, best_step=best_step, last=values[-1], last_step=steps[-1],
                         rule=rule)


def summary(runs: Sequence[Run | str | os.PathLike]) -> dict[str, RunSummary]:
    """Per run, the best and the last value of each metric (see :func:`summary_keys`), the
    iterations run and the time of those iterations (:attr:`TrainTime.total`).

    Best is the largest value for accuracy-like keys and the smallest for loss-like ones (see
    :func:`better_rule`); a key whose name says neither has no best. Non-finite values are
    never best.

    Returns:
        ``{run name: RunSummary}``, in the order of ``runs``.
    """
    out = {}
    for run in _as_runs(runs):
        metrics = {k: _metric(*run.series[k], better_rule(k)) for k in summary_keys(run)}
        time = _train_time(run).total if "train/time" in run.series else None
        out[run.name] = RunSummary(metrics=metrics, iterations=run.last_step(), train_time=time)
    return out


# ---------------------------------------------------------------------------------- printing
def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if v != v or math.isinf(v):
        return str(v)
    return f"{v:.4g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.3e}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


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
