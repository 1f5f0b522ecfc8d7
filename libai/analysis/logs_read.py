"""Reading runs: the ``scalars.jsonl`` files of a RUN (a work dir or one file), merged into a
:class:`Run`, and the records the numbers of runs are given in (:class:`TrainTime`,
:class:`RunSummary`). Which files a work dir's RUN reads is told in :mod:`libai.analysis.logs`."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from libai.utils.errors import LibaiError
from libai.utils.suggest import did_you_mean

__all__ = ["SCALARS", "LogError", "MetricSummary", "Run", "RunSummary", "TrainTime", "load_runs"]

SCALARS = "scalars.jsonl"
# the Runner's time.strftime("%Y%m%d_%H%M%S"), "_2" ... for runs started in the same second
_RUN_FOLDER = re.compile(r"^\d{8}_\d{6}(_\d+)?$")
_DERIVED = re.compile(r"Derived: iterations per epoch (\d+)")
_LOG_SCAN_LINES = 2000  # the start-up lines of a run log, where "Derived" and "Resumed" are


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
    rows, bad, not_text = [], 0, None
    try:
        f = open(path, "rb")  # line by line: one damaged line must not hide the others
    except OSError as e:
        raise LogError(f"cannot read {path}: {e.strerror or e}") from e
    with f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
                row["step"] = int(row["step"])
            except UnicodeDecodeError as e:  # not text as libai writes it (UTF-8)
                not_text = not_text or (number, raw[e.start:e.start + 1])
                bad += 1
                continue
            except (ValueError, KeyError, TypeError):  # a line cut short by a killed process
                bad += 1
                continue
            rows.append(row)
    if not rows and not_text:
        raise LogError(f"{path} is not UTF-8 text (line {not_text[0]} has the byte "
                       f"0x{not_text[1].hex()}): a {SCALARS} is JSON lines in UTF-8, as libai "
                       f"writes it. Is this the right file?")
    if not rows and bad:
        raise LogError(f"{path}: none of its {bad} line(s) is a JSON row with a 'step', as a "
                       f"{SCALARS} holds. Is this the right file?")
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
    # a run that logged no step (a refused --resume, a crash at start-up) began no training
    fresh = [f for f in folders if infos[f][0] and not infos[f][1]
             and os.path.isfile(os.path.join(f, SCALARS))]
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
    """Read each RUN (a work dir or a ``scalars.jsonl`` file); see :mod:`libai.analysis.logs`.

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


def as_runs(runs: Sequence[Run | str | os.PathLike], names: Sequence[str] | None = None
            ) -> list[Run]:
    """``runs`` as Run objects: read from their paths, or renamed to ``names`` when given."""
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
