"""AmpOptimWrapper: OptimWrapper plus autocast, and a GradScaler for float16.

``optim_context`` also enters ``torch.autocast`` on the device type of the model's parameters.
With ``dtype="float16"`` the loss is scaled before backward and the gradients are unscaled before
clipping, so ``clip_grad`` and ``grad_norm`` see true gradients; a step whose gradients overflow is
skipped by the scaler. ``dtype="bfloat16"`` has the range of float32 and needs no scaler.

Build it after the model is on its device: the scaler is made for the device of the
optimizer's parameters.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from libai.registry import OPTIM_WRAPPERS
from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

from .optim_wrapper import OptimWrapper

__all__ = ["AmpOptimWrapper"]

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ConfigError(
        f"optim_wrapper.dtype={dtype!r} is not supported by AmpOptimWrapper."
        f"{did_you_mean(str(dtype), _DTYPES)} Use 'float16' or 'bfloat16'."
    )


def _float16_supported(device_type: str) -> bool:
    """Whether this torch build can autocast to float16 and scale gradients on ``device_type``."""
    try:
        torch.amp.GradScaler(device_type)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autocast(device_type=device_type, dtype=torch.float16):
                pass
        except RuntimeError:
            return False
    return not any("not supported" in str(w.message) for w in caught)


def _device_type_of(params: Iterator[torch.Tensor]) -> str:
    first = next(iter(params), None)
    return "cpu" if first is None else first.device.type


def _make_scaler(device_type: str, loss_scale: str | float | Mapping) -> torch.amp.GradScaler:
    if loss_scale == "dynamic":
        return torch.amp.GradScaler(device_type)
    if isinstance(loss_scale, (int, float)) and not isinstance(loss_scale, bool):
        if loss_scale <= 0:
            raise ConfigError(f"optim_wrapper.loss_scale must be > 0, got {loss_scale!r}.")
        # A fixed scale: it never grows; GradScaler cannot disable backoff, so an overflow
        # still halves it (and skips that step) rather than skipping every later step.
        return torch.amp.GradScaler(
            device_type, init_scale=float(loss_scale), growth_interval=2**31 - 1
        )
    if isinstance(loss_scale, Mapping):
        try:
            return torch.amp.GradScaler(device_type, **loss_scale)
        except (TypeError, AssertionError) as e:
            raise ConfigError(
                f"optim_wrapper.loss_scale={dict(loss_scale)!r} is not valid for "
                f"torch.amp.GradScaler: {e}. Valid keys: init_scale, growth_factor, "
                f"backoff_factor (< 1), growth_interval (growth_factor > 1)."
            ) from e
    raise ConfigError(
        f"optim_wrapper.loss_scale must be 'dynamic', a positive number (fixed scale) or a dict "
        f"of torch.amp.GradScaler arguments, got {loss_scale!r}."
    )


@OPTIM_WRAPPERS.register_module()
class AmpOptimWrapper(OptimWrapper):
    """OptimWrapper with automatic mixed precision.

    Args:
        optimizer: The optimizer to drive.
        dtype: Autocast dtype, "float16" or "bfloat16". Defaults to "float16".
        loss_scale: For float16: "dynamic", a number (a scale that never grows; it still
            halves on overflow) or a dict of
            ``torch.amp.GradScaler`` arguments. Ignored for bfloat16. Defaults to "dynamic".
        accumulative_counts: See :class:`OptimWrapper`. Defaults to 1.
        clip_grad: See :class:`OptimWrapper`. Defaults to None.

    Raises:
        ConfigError: an unknown dtype or loss_scale, float16 on a CPU whose torch build cannot
            do it, or bfloat16 on a GPU without bfloat16 support.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        dtype: str | torch.dtype = "float16",
        loss_scale: str | float | dict = "dynamic",
        accumulative_counts: int = 1,
        clip_grad: dict | None = None,
    ) -> None:
        super().__init__(optimizer, accumulative_counts=accumulative_counts, clip_grad=clip_grad)
        self.dtype = _resolve_dtype(dtype)
        device_type = _device_type_of(p for g in optimizer.param_groups for p in g["params"])
        self.scaler: torch.amp.GradScaler | None = None
        if self.dtype == torch.float16:
            if not _float16_supported(device_type):
                raise ConfigError(
                    f"AmpOptimWrapper(dtype='float16') is not supported on {device_type!r} by "
                    f"torch {torch.__version__}. Use dtype='bfloat16' on CPU (or upgrade torch)."
                )
            self.scaler = _make_scaler(device_type, loss_scale)
        elif device_type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ConfigError(
                "AmpOptimWrapper(dtype='bfloat16') needs a GPU with bfloat16 support; this one "
                "has none. Use dtype='float16'."
            )

    @contextmanager
    def optim_context(self, model: nn.Module) -> Iterator[None]:
        """Forward context: ``no_sync`` while accumulating, and autocast to ``self.dtype``.

        Args:
            model: The model called inside the context.
        """
        device_type = _device_type_of(model.parameters())
        with super().optim_context(model), torch.autocast(device_type, dtype=self.dtype):
            yield

    def _run_backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        if self.scaler is None:
            loss.backward(**kwargs)
        else:
            self.scaler.scale(loss).backward(**kwargs)

    def step(self, **kwargs: Any) -> None:
        """Unscale (float16), clip, then step; the scaler skips steps with inf/NaN gradients.

        Args:
            **kwargs: Passed to ``optimizer.step``.
        """
        if self.scaler is None:
            super().step(**kwargs)
            return
        if self._clip is not None:
            self.scaler.unscale_(self.optimizer)
            self._clip_grads()
        self.scaler.step(self.optimizer, **kwargs)
        self.scaler.update()

    def scalars(self) -> dict[str, float]:
        """``grad_norm`` (if clipping by norm) and, for float16, the current ``loss_scale``."""
        out = super().scalars()
        if self.scaler is not None:
            out["loss_scale"] = float(self.scaler.get_scale())
        return out

    def state_dict(self) -> dict[str, Any]:
        """The :class:`OptimWrapper` state plus the scaler's (``loss_scaler``) for float16."""
        state = super().state_dict()
        if self.scaler is not None:
            state["loss_scaler"] = self.scaler.state_dict()
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        super().load_state_dict(state_dict)
        if self.scaler is not None and "loss_scaler" in state_dict:
            self.scaler.load_state_dict(state_dict["loss_scaler"])

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", dtype={str(self.dtype).replace('torch.', '')})"
