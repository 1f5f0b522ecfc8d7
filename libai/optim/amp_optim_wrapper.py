"""AmpOptimWrapper: OptimWrapper with a mixed precision policy, and that policy's checks.

:func:`mixed_precision` turns ``optim_wrapper.dtype`` and ``loss_scale`` into a checked
:class:`~libai.optim.precision.Precision` (autocast, and a GradScaler for float16), which
:class:`AmpOptimWrapper` and :class:`~libai.optim.GraphOptimWrapper` hold. What the policy changes
in a step is written in ``precision.py``.

Build it after the model is on its device: the scaler is made for the device of the
optimizer's parameters.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping

import torch

from libai.registry import OPTIM_WRAPPERS
from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

from .optim_wrapper import OptimWrapper
from .precision import Precision

__all__ = ["AmpOptimWrapper", "mixed_precision"]

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


def mixed_precision(optimizer: torch.optim.Optimizer, dtype: str | torch.dtype,
                    loss_scale: str | float | Mapping = "dynamic",
                    owner: str = "AmpOptimWrapper") -> Precision:
    """The checked precision policy for ``optim_wrapper.dtype`` and ``loss_scale``.

    Args:
        optimizer: Its parameters' device decides the autocast device and the scaler's.
        dtype: "float16" or "bfloat16" (or the torch dtype).
        loss_scale: For float16, see :class:`AmpOptimWrapper`. Defaults to "dynamic".
        owner: The wrapper named in error messages. Defaults to "AmpOptimWrapper".

    Raises:
        ConfigError: an unknown dtype or loss_scale, float16 on a CPU whose torch build cannot
            do it, or bfloat16 on a GPU without bfloat16 support.
    """
    dtype = _resolve_dtype(dtype)
    device_type = _device_type_of(p for g in optimizer.param_groups for p in g["params"])
    if dtype == torch.float16:
        if not _float16_supported(device_type):
            raise ConfigError(
                f"{owner}(dtype='float16') is not supported on {device_type!r} by "
                f"torch {torch.__version__}. Use dtype='bfloat16' on CPU (or upgrade torch)."
            )
        return Precision(dtype, _make_scaler(device_type, loss_scale))
    if device_type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(
            f"{owner}(dtype='bfloat16') needs a GPU with bfloat16 support; this one "
            f"has none. Use dtype='float16'."
        )
    return Precision(dtype)


@OPTIM_WRAPPERS.register_module()
class AmpOptimWrapper(OptimWrapper):
    """OptimWrapper with automatic mixed precision: the same steps, under a
    :class:`~libai.optim.precision.Precision` policy built from ``dtype``.

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
        # checked before the base class checks the optimizer's type: that error comes first
        if not isinstance(optimizer, torch.optim.Optimizer):
            super().__init__(optimizer)  # raises the ConfigError
        super().__init__(optimizer, accumulative_counts=accumulative_counts, clip_grad=clip_grad,
                         precision=mixed_precision(optimizer, dtype, loss_scale))

    @property
    def dtype(self) -> torch.dtype:
        """The autocast dtype (the precision policy's)."""
        return self.precision.dtype

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The float16 GradScaler (the precision policy's), or None."""
        return self.precision.scaler

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", dtype={self.precision.name})"
