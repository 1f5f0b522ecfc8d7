"""Precision: what mixed precision changes in a training step, as one policy object.

Every optim wrapper holds one (``optim_wrapper.precision``). The float32 policy, ``Precision()``,
changes nothing. A mixed precision policy (built and checked by
:func:`libai.optim.amp_optim_wrapper.mixed_precision` from ``optim_wrapper.dtype`` and
``loss_scale``) changes three things:

- the forward runs under ``torch.autocast(dtype)`` (:meth:`Precision.context`);
- with a GradScaler (float16), the loss is scaled before backward (:meth:`Precision.backward`),
  and the gradients are unscaled before clipping, so ``clip_grad`` and ``grad_norm`` see true
  gradients; the scaler skips a step whose gradients overflow (:meth:`Precision.step`);
- the scaler's state is saved as ``loss_scaler`` and its scale logged as ``loss_scale``.

bfloat16 has the range of float32 and needs no scaler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

__all__ = ["Precision"]

_NO_CONTEXT = nullcontext()


class Precision:
    """Autocast dtype and optional GradScaler of a training step.

    Args:
        dtype: The autocast dtype, or None for float32 (no autocast). Defaults to None.
        scaler: A ``torch.amp.GradScaler`` (float16), or None. Defaults to None.
    """

    def __init__(self, dtype: torch.dtype | None = None,
                 scaler: torch.amp.GradScaler | None = None) -> None:
        self.dtype = dtype
        self.scaler = scaler

    @property
    def enabled(self) -> bool:
        """True when the forward runs under autocast."""
        return self.dtype is not None

    @property
    def name(self) -> str | None:
        """``"bfloat16"`` / ``"float16"``, or None for float32."""
        return None if self.dtype is None else str(self.dtype).replace("torch.", "")

    def context(self, model: nn.Module,
                inner: AbstractContextManager = _NO_CONTEXT) -> AbstractContextManager:
        """The forward's context: ``inner`` (e.g. DDP ``no_sync``) and autocast on the device type
        of the model's parameters. ``inner`` alone in float32."""
        if self.dtype is None:
            return inner
        return self._autocast(model, inner)

    @contextmanager
    def _autocast(self, model: nn.Module, inner: AbstractContextManager) -> Iterator[None]:
        first = next(iter(model.parameters()), None)
        device_type = "cpu" if first is None else first.device.type
        with inner, torch.autocast(device_type, dtype=self.dtype):
            yield

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward(**kwargs)``, the loss scaled first when there is a scaler."""
        if self.scaler is None:
            loss.backward(**kwargs)
        else:
            self.scaler.scale(loss).backward(**kwargs)

    def step(self, optimizer: torch.optim.Optimizer, clip: Callable[[], Any] | None = None,
             **kwargs: Any) -> None:
        """``clip()`` (if given) then ``optimizer.step(**kwargs)``; with a scaler, the gradients
        are unscaled before ``clip`` and the scaler steps (skipping on inf/NaN) and updates."""
        if self.scaler is None:
            if clip is not None:
                clip()
            optimizer.step(**kwargs)
            return
        if clip is not None:
            self.scaler.unscale_(optimizer)
            clip()
        self.scaler.step(optimizer, **kwargs)
        self.scaler.update()

    def scalars(self) -> dict[str, float]:
        """``loss_scale`` with a scaler (a device sync: call it at the logging interval only)."""
        return {} if self.scaler is None else {"loss_scale": float(self.scaler.get_scale())}

    def state_dict(self) -> dict[str, Any]:
        """``{"loss_scaler": ...}`` with a scaler, else empty: merged into the wrapper's state."""
        return {} if self.scaler is None else {"loss_scaler": self.scaler.state_dict()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore the scaler from a wrapper state that has ``loss_scaler`` (others are kept)."""
        if self.scaler is not None and "loss_scaler" in state_dict:
            self.scaler.load_state_dict(state_dict["loss_scaler"])

    def __repr__(self) -> str:
        scaler = "" if self.scaler is None else ", GradScaler"
        return f"Precision({self.name or 'float32'}{scaler})"
