"""EMAHook: an exponential moving average of the weights, evaluated in place of the weights."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from libai.registry import HOOKS
from libai.utils.errors import CheckpointError, ConfigError

from .hook import Hook, RunnerView

__all__ = ["EMAHook"]


@HOOKS.register_module()
class EMAHook(Hook):
    """Keep ``ema = (1 - momentum) * ema + momentum * weights`` after every optimizer step.

    The average covers the parameters of ``runner.unwrapped_model`` (and its floating-point
    buffers with ``update_buffers``). It starts as a copy of the weights after iteration
    ``begin_iter`` (0-based) and is updated after every later iteration, on the model's device,
    with one fused ``torch._foreach_lerp_`` call.

    Validation and test see the averaged weights: ``before_val_epoch`` swaps them into the model
    and ``after_val_epoch`` swaps the trained weights back (same for test). The swap copies
    tensor by tensor through one temporary, so it needs no second copy of the model and keeps
    the parameters' identity and storage (optimizer, DDP and compiled graphs are unaffected).
    Before the averaging has started, evaluation uses the plain weights.

    Args:
        momentum: Weight of the new value in each update (a small number: the average's horizon
            is about ``1 / momentum`` iterations). Defaults to 0.0002.
        update_buffers: Average floating-point buffers too (BatchNorm running statistics);
            otherwise evaluation uses the model's current buffers. Defaults to False.
        begin_iter: Iteration (0-based) after which the average starts. Defaults to 0.

    State kept in checkpoints: the averaged tensors (``{name: tensor}``), restored exactly.
    """

    priority = "NORMAL"

    def __init__(
        self, momentum: float = 0.0002, update_buffers: bool = False, begin_iter: int = 0
    ) -> None:
        if not 0.0 < momentum < 1.0:
            raise ConfigError(
                f"EMAHook: momentum must be in (0, 1) (the weight of the new weights in each "
                f"update, e.g. 0.0002), got {momentum!r}."
            )
        if isinstance(begin_iter, bool) or not isinstance(begin_iter, int) or begin_iter < 0:
            raise ConfigError(f"EMAHook: begin_iter must be an int >= 0, got {begin_iter!r}.")
        self.momentum = float(momentum)
        self.update_buffers = update_buffers
        self.begin_iter = begin_iter
        self._names: list[str] = []
        self._live: list[torch.Tensor] = []  # the model's tensors, averaged by lerp
        self._ema: list[torch.Tensor] = []
        self._started = False
        self._swapped = False
        self._pending: dict[str, torch.Tensor] | None = None
        self._state_loaded = False

    # --------------------------------------------------------------------------- set-up
    def _bind(self, runner: RunnerView) -> None:
        """Find the model's tensors to average (once)."""
        if self._names:
            return
        model: nn.Module = runner.unwrapped_model
        named = list(model.named_parameters())
        if self.update_buffers:
            # integer buffers (BatchNorm's num_batches_tracked) are counters, not averaged
            named += [(n, b) for n, b in model.named_buffers() if b.is_floating_point()]
        self._names = [n for n, _ in named]
        self._live = [t for _, t in named]
        self._ema = []

    @torch.no_grad()
    def _start(self, runner: RunnerView) -> None:
        """Start the average from the current weights, or from state loaded from a checkpoint."""
        self._bind(runner)
        if self._pending is not None:
            self._load_tensors(self._pending)
            self._pending = None
        else:
            self._ema = [t.detach().clone() for t in self._live]
        self._started = True

    def before_train(self, runner: RunnerView) -> None:
        self._bind(runner)
        if self._pending is not None:  # resumed
            self._start(runner)

    @torch.no_grad()
    def after_train_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        if runner.iter < self.begin_iter:
            return
        if not self._started:
            self._start(runner)
            return
        torch._foreach_lerp_(self._ema, self._live, self.momentum)

    # ----------------------------------------------------------------------------- swap
    @torch.no_grad()
    def _swap(self) -> None:
        for live, ema in zip(self._live, self._ema):
            tmp = live.detach().clone()
            live.copy_(ema)
            ema.copy_(tmp)

    def _swap_in(self, runner: RunnerView) -> None:
        if not self._started and self._pending is not None:
            self._start(runner)  # evaluating a resumed run before training
        if self._started and not self._swapped:
            self._swap()
            self._swapped = True

    def _swap_out(self, runner: RunnerView, metrics: Any = None) -> None:
        if self._swapped:
            self._swap()
            self._swapped = False

    before_val_epoch = before_test_epoch = _swap_in
    after_val_epoch = after_test_epoch = _swap_out

    def after_load_checkpoint(self, runner: RunnerView, checkpoint: Any = None) -> None:
        # A checkpoint without EMA state (saved without this hook) restarts the average from the
        # weights just loaded, instead of keeping an average of weights that no longer apply.
        if not self._state_loaded and self._started:
            self._start(runner)
        self._state_loaded = False

    # ---------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        if not self._started:
            return {}
        # while swapped in, the model holds the average and self._ema the trained weights
        if self._swapped:
            return {n: t.detach().clone() for n, t in zip(self._names, self._live)}
        return dict(zip(self._names, self._ema))

    def load_state_dict(self, state: dict) -> None:
        self._state_loaded = True
        if not state:
            self._started, self._ema, self._pending = False, [], None
            return
        if self._names and self._started:
            self._load_tensors(state)
        else:
            self._pending = dict(state)

    @torch.no_grad()
    def _load_tensors(self, state: dict) -> None:
        if self._swapped:  # put the trained weights back first
            self._swap()
            self._swapped = False
        missing = [n for n in self._names if n not in state]
        unexpected = [n for n in state if n not in set(self._names)]
        if missing or unexpected:
            raise CheckpointError(
                f"EMAHook: the checkpoint's EMA tensors do not match the model: missing "
                f"{missing[:5]}{' ...' if len(missing) > 5 else ''}, unexpected "
                f"{unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}. Was it saved with "
                f"another model or another update_buffers setting?"
            )
        if not self._ema:
            self._ema = [torch.empty_like(t) for t in self._live]
        for name, live, ema in zip(self._names, self._live, self._ema):
            value = state[name]
            if value.shape != live.shape:
                raise CheckpointError(
                    f"EMAHook: EMA tensor '{name}' has shape {tuple(value.shape)} in the "
                    f"checkpoint but {tuple(live.shape)} in the model."
                )
            ema.copy_(value)
        self._started = True
