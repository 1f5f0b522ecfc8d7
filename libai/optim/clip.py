"""Gradient clipping: the ``clip_grad`` option checked, and a norm clip that also works on sharded
parameters (DTensor: FSDP2, tensor parallel).

``torch.nn.utils.clip_grad_norm_`` handles a list of plain tensors, or a list of DTensors (the
norm then comes back as a DTensor). Tensor parallel alone leaves a mix: the split layers hold
DTensors, the embeddings and LayerNorms plain tensors; 2-D FSDP x TP leaves DTensors on two
meshes. torch refuses to mix either in one norm. Here each kind gets its own norm, the norms are
combined, and every gradient is scaled by the same factor. Plain tensors alone take torch's
function unchanged (the same math, bit for bit).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import torch
from torch import nn

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["clip_grad_norm_", "parse_clip_grad"]


def _is_dtensor(t: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def _full(norm: torch.Tensor) -> torch.Tensor:
    return norm.full_tensor() if _is_dtensor(norm) else norm


def clip_grad_norm_(params: list[torch.Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None, *,
                    combine: Callable[[torch.Tensor, float], torch.Tensor] | None = None,
                    skip: Collection[torch.Tensor] = ()) -> torch.Tensor:
    """Scale the gradients of ``params`` so that their total norm is at most ``max_norm``.

    Arguments as ``torch.nn.utils.clip_grad_norm_``, and for parameters split over processes in
    a way DTensor does not know (pipeline stages): ``combine(norm of these, norm_type)`` returns
    the norm over every process, and ``skip`` lists parameters scaled but not counted here (a tied
    copy that another process counts). Returns the total norm before clipping, a plain tensor
    (also when the gradients are DTensors).
    """
    if combine is None and (not torch.distributed.is_available()
                            or not any(_is_dtensor(p) for p in params)):
        return nn.utils.clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite, foreach)
    # one group per device mesh (2-D FSDP x TP puts the split layers on a 2-D mesh and the rest
    # on the FSDP mesh), plain tensors on their own
    skipped = {id(p) for p in skip}
    groups: dict[object, list[torch.Tensor]] = {}
    for p in params:
        if id(p) not in skipped:
            groups.setdefault(p.device_mesh if _is_dtensor(p) else None, []).append(p)
    if combine is None and len(groups) == 1 and None not in groups:
        return _full(nn.utils.clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite,
                                              foreach))
    norms = [_full(nn.utils.get_total_norm([p.grad for p in group], norm_type, error_if_nonfinite,
                                           foreach)) for group in groups.values()]
    device = params[0].grad.device
    total = torch.linalg.vector_norm(torch.stack([n.float() for n in norms]), norm_type) \
        if norms else torch.zeros((), device=device)
    if combine is not None:
        total = combine(total, norm_type)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for p in params:
        # scaling every shard by the same factor scales the whole gradient
        grad = p.grad.to_local() if _is_dtensor(p.grad) else p.grad
        grad.mul_(coef.to(grad.device, grad.dtype))
    return total


_CLIP_ARGS = {
    "norm": ("max_norm", {"max_norm", "norm_type", "error_if_nonfinite", "foreach"}),
    "value": ("clip_value", {"clip_value", "foreach"}),
}


def parse_clip_grad(clip_grad: Mapping | None) -> tuple[str, dict[str, Any]] | None:
    """Check ``clip_grad`` and return ``(kind, kwargs for the torch clip function)`` or None."""
    if clip_grad is None or (isinstance(clip_grad, Mapping) and not clip_grad):
        return None
    if not isinstance(clip_grad, Mapping):
        raise ConfigError(
            f"optim_wrapper.clip_grad must be a dict such as dict(type='norm', max_norm=1.0), "
            f"got {type(clip_grad).__name__} {clip_grad!r}."
        )
    args = dict(clip_grad)
    kind = args.pop("type", "norm")
    if not isinstance(kind, str) or kind not in _CLIP_ARGS:
        raise ConfigError(
            f"optim_wrapper.clip_grad.type={kind!r} is not a clipping method."
            f"{did_you_mean(str(kind), _CLIP_ARGS)} Use dict(type='norm', max_norm=1.0) to "
            f"clip the total gradient norm, or dict(type='value', clip_value=0.5) to clip each "
            f"gradient element."
        )
    required, allowed = _CLIP_ARGS[kind]
    for key in args:
        if key not in allowed:
            raise ConfigError(
                f"optim_wrapper.clip_grad has an unknown key {key!r} for type={kind!r}."
                f"{did_you_mean(key, allowed)} Valid keys: {', '.join(sorted(allowed))}."
            )
    if required not in args:
        raise ConfigError(
            f"optim_wrapper.clip_grad with type={kind!r} needs {required!r}, "
            f"e.g. dict(type={kind!r}, {required}=1.0)."
        )
    for key, value in args.items():  # torch would fail on them only at the first step
        if key in ("max_norm", "norm_type", "clip_value") and value != "inf" and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ConfigError(f"optim_wrapper.clip_grad.{key}={value!r}: expected a number >= 0.")
    return kind, args

