"""LogProcessor: what LoggerHook's lines say. The hook decides when a line is due and where its
scalars go; the processor only words them, so that a different log format is a different
processor, and the hook's rules stay as they are::

    Iter [120/1000]  lr: 1.0000e-03  eta: 0:01:02  time: 0.0123  data_time: 0.0010  loss: 0.4321
    Epoch [2/10][30/45]  lr: ...
    Iter(val) [1000/1000]  accuracy: 91.2  samples: 2000  duration: 1.52s
"""

from __future__ import annotations

import datetime
import math
import time
from typing import Any

from libai.visualization.figures import format_part, format_value

__all__ = ["LogProcessor"]


class LogProcessor:
    """Words LoggerHook's training, heartbeat and evaluation lines.

    ``eta`` extrapolates this session's average speed since :meth:`start_train` (validation
    included); ``time``/``data_time`` come as given (the IterTimerHook's window averages).

    Args:
        log_metric_by_epoch: In epoch loops, label validation lines by epoch
            (``Epoch(val) [3/10]``) instead of by iteration. Defaults to False.
    """

    def __init__(self, log_metric_by_epoch: bool = False) -> None:
        self.log_metric_by_epoch = log_metric_by_epoch
        self.by_epoch = False
        self.max_iters = 0  # what this run reaches (--fast-dev-run: 2)
        self._shown_epochs: int | None = None
        self._shown_per_epoch: int | None = None
        self._start_iter = 0
        self._t_start = 0.0
        self._t_eval = 0.0

    def start_train(self, runner: Any, max_iters: int, per_epoch: int | None) -> None:
        """Training starts at ``runner.iter`` and reaches ``max_iters``; ``per_epoch``: the
        iterations of an epoch."""
        self.by_epoch = runner.max_epochs is not None
        self.max_iters = max_iters
        # the epochs and batches per epoch the lines show: where this run stops (a dry run
        # that stops early: Epoch [1/1][2/2], not [1/10][2/37])
        self._shown_epochs, self._shown_per_epoch = runner.max_epochs, per_epoch
        if self.by_epoch and per_epoch and max_iters < runner.max_iters:
            left = max_iters - runner.iter
            self._shown_epochs = runner.epoch + max(1, math.ceil(left / per_epoch))
            self._shown_per_epoch = min(per_epoch, max(left, 1))
        self._start_iter = runner.iter
        self._t_start = time.perf_counter()

    def start_eval(self) -> None:
        """An evaluation set starts: its line says how long it took."""
        self._t_eval = time.perf_counter()

    def head(self, batch_idx: int | None, done: int, epoch: int) -> str:
        """``Epoch [e/E][b/B]`` in epoch loops (within an epoch), else ``Iter [done/max]``."""
        if self.by_epoch and batch_idx is not None:
            per_epoch = self._shown_per_epoch or "?"
            return f"Epoch [{epoch + 1}/{self._shown_epochs}][{batch_idx + 1}/{per_epoch}]"
        return f"Iter [{done}/{self.max_iters}]"

    def train_line(self, batch_idx: int | None, done: int, epoch: int, means: dict[str, float],
                   extra: dict[str, float], timing: dict[str, float]) -> str:
        """The line of a log interval: the head, ``lr``, ``eta``, the timing, ``memory``, the
        step's logged means, then the other figures of ``extra`` (grad_norm, throughput)."""
        parts = [self.head(batch_idx, done, epoch)]
        if "lr" in extra:
            parts.append(f"lr: {extra['lr']:.4e}")
        elapsed = time.perf_counter() - self._t_start
        if done > self._start_iter:
            eta = elapsed / (done - self._start_iter) * max(self.max_iters - done, 0)
            parts.append(f"eta: {datetime.timedelta(seconds=int(eta))}")
        parts += [f"{k}: {v:.4f}" for k, v in timing.items()]
        if "memory" in extra:
            parts.append(f"memory: {extra['memory']:.0f}")
        parts += [format_part(k, v) for k, v in means.items()]
        parts += [format_part(k, v) for k, v in extra.items() if k not in ("lr", "memory")]
        return "  ".join(parts)

    def metrics_by_epoch(self, training: bool) -> bool:
        """Validation during training is labelled by epoch (and its JSON row carries it)."""
        return training and self.by_epoch and self.log_metric_by_epoch

    def eval_line(self, stage: str, training: bool, runner: Any, scalars: dict[str, float],
                  samples: Any = None) -> str:
        """The line of an evaluation set (``stage``: ``"val"`` or ``"test"``), at the end of
        the set :meth:`start_eval` began."""
        if self.metrics_by_epoch(training):
            head = f"Epoch({stage}) [{runner.epoch}/{self._shown_epochs}]"
        elif training:
            head = f"Iter({stage}) [{runner.iter}/{self.max_iters}]"
        else:
            head = f"{'Val' if stage == 'val' else 'Test'} (iteration {runner.iter})"
        parts = [head] + [f"{k}: {format_value(v)}" for k, v in scalars.items()]
        if samples is not None:
            parts.append(f"samples: {samples}")
        parts.append(f"duration: {time.perf_counter() - self._t_eval:.2f}s")
        return "  ".join(parts)
