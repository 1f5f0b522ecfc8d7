"""What the experiment-tracker backends (:mod:`.wandb_backend`, :mod:`.mlflow_backend`) share.

Both trackers are optional dependencies, imported when a run opens them; a missing one is one
line naming the ``pip install``. Both keep the id of their tracker run in a small JSON file in
the log folder, so that a resumed run (and the test that ``tools/train.py`` runs after
training) logs into the same tracker run, and both end that run with the way the process ends.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from typing import Any

from libai.utils.errors import ConfigError

__all__ = ["exit_status", "import_tracker", "read_json", "reopen", "write_json"]


def import_tracker(backend: str, module: str, package: str) -> Any:
    """Import an optional tracker library, or one ConfigError line naming the pip install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"LoggerHook backend {backend} needs {module}: pip install {package}"
        ) from None


def exit_status() -> str:
    """How the run is ending, read while LoggerHook closes its backends (in the runner's
    ``finally``): 'FINISHED', 'FAILED' (an exception) or 'KILLED' (Ctrl-C)."""
    exc = sys.exc_info()[1]
    if exc is None:
        return "FINISHED"
    return "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"


def read_json(path: str) -> dict:
    """The dict in the JSON file ``path``; ``{}`` if it is missing, unreadable or not a dict."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: str, data: dict) -> None:
    """Write ``data`` to ``path`` through a temporary file and an atomic rename."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def reopen(backend: Any, log_dir: str, resume_step: int | None) -> None:
    """Where a tracker backend writes and whether it continues a run. The first ``open`` sets
    the folder; a later one (the test that ``tools/train.py`` runs after training, into the run
    folder) goes on with the same tracker run, in that folder."""
    if backend.log_dir is None:
        backend.log_dir = log_dir
        backend._resume = bool(resume_step)  # 0: a fresh training run
    else:
        backend._resume = True
    backend._flushed_at = time.monotonic()
