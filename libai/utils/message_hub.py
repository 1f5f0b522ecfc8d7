"""MessageHub: the runner's store of logged scalars and runtime facts.

Scalars keep a bounded history (a ring buffer) so that logging cost does not grow with the
iteration count. Hooks write with ``update_scalar``/``update_info`` and read smoothed values with
``mean``.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Any

import torch

__all__ = ["MessageHub", "ScalarHistory"]


def _as_list(values: Any) -> list:
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


class ScalarHistory:
    """The bounded history of one scalar: ``values[i]`` averaged ``counts[i]`` samples.

    A per-iteration writer may append to ``values`` and ``counts`` directly (one entry each),
    which skips a method call; ``MessageHub.update_scalar`` does the same with checks.
    """

    __slots__ = ("values", "counts", "last_step")

    def __init__(self, maxlen: int) -> None:
        self.values: deque[float] = deque(maxlen=maxlen)
        self.counts: deque[int] = deque(maxlen=maxlen)
        self.last_step: int = -1


class MessageHub:
    """Scalars with bounded history and a dict of runtime info.

    Args:
        max_history: Values kept per scalar. Defaults to 1000.
    """

    def __init__(self, max_history: int = 1000) -> None:
        self.max_history = max_history
        self._scalars: dict[str, ScalarHistory] = {}
        self.info: dict[str, Any] = {}

    def update_scalar(self, name: str, value: float, count: int = 1, step: int = -1) -> None:
        """Record ``value`` (a Python number; convert tensors once, where they are produced)."""
        h = self._scalars.get(name)
        if h is None:
            h = self._scalars[name] = ScalarHistory(self.max_history)
        h.values.append(float(value))
        h.counts.append(count)
        h.last_step = step

    def update_scalars(self, values: dict[str, float], step: int = -1) -> None:
        for k, v in values.items():
            self.update_scalar(k, v, step=step)

    def history(self, name: str) -> ScalarHistory:
        """The history of ``name`` (created empty if new). The object stays the same for the
        hub's lifetime, across ``load_state_dict`` too, so a hook may keep it."""
        h = self._scalars.get(name)
        if h is None:
            h = self._scalars[name] = ScalarHistory(self.max_history)
        return h

    def has(self, name: str) -> bool:
        """Whether ``name`` has at least one value."""
        h = self._scalars.get(name)
        return h is not None and len(h.values) > 0

    def latest(self, name: str) -> float:
        return self._scalars[name].values[-1]

    def mean(self, name: str, window: int | None = None) -> float:
        """Count-weighted mean of the last ``window`` values (all kept values if None)."""
        h = self._scalars[name]
        n = len(h.values) if window is None else min(window, len(h.values))
        if n == 0:
            raise ValueError(f"scalar '{name}' has no values")
        # the newest n, read from the right end: no copy of the whole history per call
        vals = islice(reversed(h.values), n)
        cnts = list(islice(reversed(h.counts), n))
        return sum(v * c for v, c in zip(vals, cnts)) / sum(cnts)

    def last_step(self, name: str) -> int:
        return self._scalars[name].last_step

    def scalar_names(self) -> list[str]:
        return list(self._scalars)

    def update_info(self, key: str, value: Any) -> None:
        self.info[key] = value

    def get_info(self, key: str, default: Any = None) -> Any:
        return self.info.get(key, default)

    def state_dict(self) -> dict:
        """Histories as float64/int64 tensors: exact, and one object each to pickle (a list of
        1000 floats costs a checkpoint save milliseconds)."""
        return {
            "scalars": {
                k: {"values": torch.tensor(list(h.values), dtype=torch.float64),
                    "counts": torch.tensor(list(h.counts), dtype=torch.int64),
                    "last_step": h.last_step}
                for k, h in self._scalars.items()
            },
            "info": {k: v for k, v in self.info.items() if isinstance(v, (int, float, str, bool))},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore the scalars and info; histories are refilled in place (see ``history``)."""
        scalars = state.get("scalars", {})
        for k, h in self._scalars.items():
            if k not in scalars:
                h.values.clear()
                h.counts.clear()
                h.last_step = -1
        for k, s in scalars.items():
            h = self.history(k)
            h.values.clear()
            h.counts.clear()
            h.values.extend(_as_list(s["values"]))  # tensors; lists in older checkpoints
            h.counts.extend(_as_list(s["counts"]))
            h.last_step = s["last_step"]
        self.info.update(state.get("info", {}))
