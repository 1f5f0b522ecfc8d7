"""HistogramHook: histograms of the weights and gradients, to the LoggerHook's backends."""

from __future__ import annotations

import re
from typing import Any

from libai.registry import HOOKS
from libai.utils.errors import ConfigError
from libai.visualization.backends import BaseLogBackend, Histogram

from .hook import Hook, RunnerView

__all__ = ["HistogramHook"]

_WHAT = ("weights", "grads")


@HOOKS.register_module()
class HistogramHook(Hook):
    """Every ``interval`` iterations, one histogram per parameter, sent to every backend of the
    LoggerHook that draws histograms: TensorboardBackend (HISTOGRAMS and DISTRIBUTIONS tabs),
    WandbBackend (``wandb.Histogram``), MLflowBackend only as min/max/mean/std metrics with
    ``histogram_stats=True`` (MLflow has no histograms); JsonlBackend ignores them.

    Tags and steps (steps are completed iterations, like the scalars'):

    - ``weights/<parameter name>``: after the optimizer step of iteration N, at step N.
    - ``grads/<parameter name>``: right after the backward of iteration N (the
      ``after_backward`` stage: the optimizer wrapper clips, steps and zeroes them after it),
      at step N. So they are the gradients before clipping; under float16 AMP divided by the
      loss scale (true gradients); with gradient accumulation those of the whole window, taken
      at the backward that ends the first window ending at or after iteration N (and logged at
      that iteration's step).

    Buckets are computed on the parameters' device (``torch.histc``; non-finite values are left
    out); only the counts and a few statistics reach the host. Rank 0 only: under DDP every rank
    holds the same weights and, after backward, the same gradients.

    Args:
        interval: Every this many iterations. Defaults to 100.
        what: ``'weights'``, ``'grads'`` or both. Defaults to both.
        bins: Buckets per histogram. Defaults to 64.
        names: A regular expression: only parameters whose name it matches (``re.search``),
            e.g. ``'^backbone\\.'``. Defaults to None (all parameters).
    """

    priority = "LOW"

    def __init__(
        self,
        interval: int = 100,
        what: str | tuple[str, ...] | list[str] = _WHAT,
        bins: int = 64,
        names: str | None = None,
    ) -> None:
        for name, value in (("interval", interval), ("bins", bins)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"HistogramHook: {name} must be an int >= 1, got {value!r}.")
        what = (what,) if isinstance(what, str) else tuple(what)
        unknown = [w for w in what if w not in _WHAT]
        if unknown or not what:
            raise ConfigError(
                f"HistogramHook: what must name 'weights' and/or 'grads', got {what!r}."
            )
        try:
            self.names = re.compile(names) if names is not None else None
        except re.error as e:
            raise ConfigError(f"HistogramHook: names={names!r} is not a regular expression "
                              f"({e}).") from None
        self.interval, self.what, self.bins = interval, what, bins
        self._backends: list[BaseLogBackend] = []
        self._params: list[tuple[str, Any]] = []
        self._grads_due = False
        if "grads" not in what:
            self.disable_stage("after_backward")
        if "weights" not in what:
            self.disable_stage("after_train_iter")

    def before_train(self, runner: RunnerView) -> None:
        backends = runner.writer.backends if runner.writer is not None else ()
        self._backends = [backend for backend in backends
                          if type(backend).add_histogram is not BaseLogBackend.add_histogram]
        if runner.rank != 0 or not self._backends:
            if runner.rank == 0:
                runner.logger.warning(
                    "HistogramHook: no LoggerHook backend draws histograms (TensorboardBackend, "
                    "WandbBackend, MLflowBackend(histogram_stats=True)); it does nothing."
                )
            self.disable_stage("after_backward")
            self.disable_stage("after_train_iter")
            return
        self._params = [
            (name, p)
            for name, p in runner.unwrapped_model.named_parameters()
            if self.names is None or self.names.search(name)
        ]
        self._grads_due = False

    def after_backward(self, runner: RunnerView) -> None:
        if not self._grads_due:
            if (runner.iter + 1) % self.interval:
                return
            self._grads_due = True
        optim = runner.optim_wrapper
        should_update = getattr(optim, "should_update", None)
        if callable(should_update) and not should_update():
            return  # accumulating: the window's last backward has its summed gradients
        self._grads_due = False
        scaler = getattr(optim, "scaler", None)
        scale = float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0
        step = runner.iter + 1
        for name, p in self._params:
            if p.grad is not None:
                grad = p.grad.detach()
                self._send(f"grads/{name}", grad / scale if scale != 1.0 else grad, step)

    def after_train_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        if (runner.iter + 1) % self.interval:
            return
        step = runner.iter + 1
        for name, p in self._params:
            self._send(f"weights/{name}", p.detach(), step)

    def _send(self, tag: str, values: Any, step: int) -> None:
        hist = Histogram.of(values, self.bins)
        if hist is None:
            return
        for backend in self._backends:
            backend.add_histogram(tag, hist, step)
