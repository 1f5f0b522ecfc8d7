"""What a sweep shows while its trials run: each running trial's step and metric, read from the
``scalars.jsonl`` its ``libai train`` process writes, and the trials done out of those to run.

On a terminal, one live bar for the sweep and one per running trial (the trial's iterations);
elsewhere (a pipe, a file, CI), a line each time a running trial logs a new value of the metric::

    [sweep 10:02:11] trial 2 (3/6): step 150/300, val/accuracy 0.9123
"""

from __future__ import annotations

import glob
import json
import os
import threading
import time
from collections.abc import Callable

from libai.visualization.progress import ProgressBar

__all__ = ["SweepProgress", "TrialWatch"]

_POLL_S = 1.0  # how often the running trials' scalars are read


class TrialWatch:
    """Follows one trial's ``scalars.jsonl`` (``trial_dir/<timestamp>/scalars.jsonl``, made by the
    trial once it starts training): the last step and the last value of ``metric``.

    Args:
        trial_dir: The trial's work dir.
        metric: The sweep's metric key (``val/accuracy``).
    """

    def __init__(self, trial_dir: str, metric: str) -> None:
        self.trial_dir = trial_dir
        self.metric = metric
        self.step = 0
        self.value: float | None = None
        self._path: str | None = None
        self._offset = 0
        self._lock = threading.Lock()  # the main thread's poll and a worker's last read

    def read(self) -> bool:
        """Read what the trial wrote since the last call; True when the metric has a new value."""
        with self._lock:
            return self._read()

    def _read(self) -> bool:
        if self._path is None:
            found = sorted(glob.glob(os.path.join(self.trial_dir, "*", "scalars.jsonl")))
            if not found:
                return False
            self._path = found[-1]
        try:
            with open(self._path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return False
        end = data.rfind(b"\n") + 1  # complete lines only; a line being written waits
        self._offset += end
        new = False
        for line in data[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict):
                continue
            if isinstance(row.get("step"), int):
                self.step = max(self.step, row["step"])
            value = row.get(self.metric)
            if isinstance(value, (int, float)):
                self.value, new = float(value), True
        return new


class SweepProgress:
    """The progress of the trials of one sweep session (see the module docstring).

    ``started`` and ``finished`` are called by the worker threads, ``poll`` by the main thread
    while it waits for them.

    Args:
        todo: The trials this session runs.
        metric: The sweep's metric key.
        say: Prints a line of the sweep (``SweepRunner.say``).
        bar: Draw live bars (on a terminal only). Defaults to True.
    """

    def __init__(self, todo: int, metric: str, say: Callable[[str], None],
                 bar: bool = True) -> None:
        self.todo = todo
        self.metric = metric
        self.say = say
        self.bar = ProgressBar(enabled=bar)
        self.started_count = 0
        self.done = 0
        self._lock = threading.Lock()
        self._running: dict[int, tuple[int, TrialWatch, int | None]] = {}
        self._last_poll = 0.0
        self.bar.add("sweep", self._sweep_text(), total=todo)

    def _sweep_text(self) -> str:
        return f"sweep: {self.done}/{self.todo} trials done"

    def started(self, number: int, trial_dir: str, total_steps: int | None) -> int:
        """A trial's process starts; returns its place in this session (1 for the first)."""
        with self._lock:
            self.started_count += 1
            place = self.started_count
            self._running[number] = (place, TrialWatch(trial_dir, self.metric), total_steps)
        self.bar.add(f"trial {number}", f"trial {number} ({place}/{self.todo})",
                     total=total_steps)
        return place

    def place(self, number: int) -> str:
        """``(3/6)``: where trial ``number`` stands in this session, or "" when not known."""
        with self._lock:
            entry = self._running.get(number)
        return f" ({entry[0]}/{self.todo})" if entry else ""

    def finished(self, number: int) -> None:
        """A trial has ended (complete, pruned, failed or interrupted)."""
        with self._lock:
            entry = self._running.pop(number, None)
            self.done += 1
        if entry is not None:  # what it wrote since the last poll: a short trial ends between two
            self._show(number, *entry)
        self.bar.remove(f"trial {number}")
        self.bar.update("sweep", completed=self.done, description=self._sweep_text())

    def poll(self, force: bool = False) -> None:
        """Read the running trials' new scalars (at most once a second unless ``force``) and
        show their step and metric."""
        now = time.monotonic()
        if not force and now - self._last_poll < _POLL_S:
            return
        self._last_poll = now
        with self._lock:
            running = list(self._running.items())
        for number, (place, watch, total) in running:
            self._show(number, place, watch, total)

    def _show(self, number: int, place: int, watch: TrialWatch, total: int | None) -> None:
        """Read a trial's new scalars and show its step and metric."""
        new = watch.read()
        of = f"/{total}" if total else ""
        value = "" if watch.value is None else f", {self.metric} {watch.value:.4g}"
        if self.bar.enabled:
            self.bar.update(f"trial {number}", completed=watch.step,
                            description=f"trial {number} ({place}/{self.todo}){value}")
        elif new:
            self.say(f"trial {number} ({place}/{self.todo}): step {watch.step}{of}{value}")

    def stop(self) -> None:
        self.bar.stop()
