"""Where a run's files live inside a work dir (docs/getting_started.md, "The work dir").

::

    work_dir/
      latest_checkpoint, iter_*.pth, best_*.pth     the checkpoints, shared by the runs
      20240101_120000/                              one folder per run, named by its start
        20240101_120000.log  config.py              the run's log and its exact config
        scalars.jsonl  tensorboard/  plots/         a training series (fresh training runs)
      20240101_130000/                              a resumed run: its log and config; its
        20240101_130000.log  config.py              scalars continue the series it resumed

A fresh training run starts a series of scalars in its own folder; a run resumed from a
checkpoint of that series continues it there (the checkpoint's ``meta["run_folder"]`` names
it), so ``tensorboard --logdir work_dir`` shows one curve per series. No run writes into
another series, and two runs started in the same second get two folders.
"""

from __future__ import annotations

import json
import os
import re
import time

__all__ = ["RUN_FOLDER", "SCALARS", "new_run_folder", "run_folders", "training_scalars",
           "wait_for_plots"]

#: A run folder's name: the start time (``time.strftime("%Y%m%d_%H%M%S")``), ``_2`` and so on
#: for runs started in the same second.
RUN_FOLDER = re.compile(r"^\d{8}_\d{6}(_\d+)?$")
#: The JSON-lines scalar file of a series (JsonlBackend's default file name).
SCALARS = "scalars.jsonl"


def new_run_folder(work_dir: str) -> tuple[str, str]:
    """Create a new, empty run folder ``work_dir/<timestamp>`` (and ``work_dir``).

    Returns:
        (its name, its path). A folder of that second already there gets a ``_2``, ``_3`` ...
        sibling instead: a run never writes into another run's folder.
    """
    os.makedirs(work_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d_%H%M%S")
    name, n = stamp, 1
    while True:
        path = os.path.join(work_dir, name)
        try:
            os.mkdir(path)
            return name, path
        except FileExistsError:
            n += 1
            name = f"{stamp}_{n}"


def _key(name: str) -> tuple[str, int]:
    return name[:15], int(name[16:] or 1)  # "20240101_120000_2" after "20240101_120000"


def run_folders(work_dir: str) -> list[str]:
    """The run folders of ``work_dir``, oldest first (a missing work dir has none)."""
    try:
        names = [n for n in os.listdir(work_dir) if RUN_FOLDER.match(n)
                 and os.path.isdir(os.path.join(work_dir, n))]
    except OSError:
        return []
    return [os.path.join(work_dir, n) for n in sorted(names, key=_key)]


def training_scalars(work_dir: str) -> str | None:
    """The ``scalars.jsonl`` of the newest training series in ``work_dir``, or None.

    A training series begins with ``train/`` scalars; the folder of an evaluation-only run
    (``tools/test.py``) holds test scalars only and is passed over.
    """
    for folder in reversed(run_folders(work_dir)):
        path = os.path.join(folder, SCALARS)
        try:
            with open(path, encoding="utf-8") as f:
                first = f.readline()
        except (OSError, UnicodeDecodeError):  # missing, or not a file libai wrote
            continue
        try:
            row = json.loads(first)
        except ValueError:
            continue
        if isinstance(row, dict) and any(str(k).startswith("train/") for k in row):
            return path
    return None


def wait_for_plots(work_dir: str, timeout: float = 120.0) -> None:
    """Wait until the background plot processes of every run in ``work_dir`` are done.

    The LoggerHook draws the plots in a process of their own; each appends one line ("Saved
    overview.png ...", "could not draw the plots" or "stopped drawing the plots") to the log of
    the run that started it. The run's process waits for them before it exits; code that uses the
    work dir in the same process right after training (a notebook) waits here first.
    Raises ``TimeoutError`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    for folder in run_folders(work_dir):
        log = os.path.join(folder, os.path.basename(folder) + ".log")
        while True:
            try:
                with open(log, encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                break
            done = (text.count("Saved overview.png") + text.count("could not draw the plots")
                    + text.count("stopped drawing the plots"))
            if done >= text.count("Plots of the scalars: drawing"):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the plots of {folder} were unfinished after {timeout:g} s")
            time.sleep(0.1)
