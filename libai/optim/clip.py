"""Gradient-norm clipping that also works on sharded parameters (DTensor: FSDP2, tensor parallel).

``torch.nn.utils.clip_grad_norm_`` handles a list of plain tensors, or a list of DTensors (the
norm then comes back as a DTensor). Tensor parallel alone leaves a mix: the split layers hold
DTensors, the embeddings and LayerNorms plain tensors; 2-D FSDP x TP leaves DTensors on two
meshes. torch refuses to mix either in one norm. Here each kind gets its own norm, the norms are
combined, and every gradient is scaled by the same factor. Plain tensors alone take torch's function unchanged (the same math, bit for bit).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["clip_grad_norm_"]


def _is_dtensor(t: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def _full(norm: torch.Tensor) -> torch.Tensor:
    return norm.full_tensor() if _is_dtensor(norm) else norm


def clip_grad_norm_(params: list[torch.Tensor], max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> torch.Tensor:
    """Scale the gradients of ``params`` so that their total norm is at most ``max_norm``.

    Arguments as ``torch.nn.utils.clip_grad_norm_``. Returns the total norm before clipping, a
    plain tensor (also when the gradients are DTensors).
    """
    if not torch.distributed.is_available() or not any(_is_dtensor(p) for p in params):
        return nn.utils.clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite, foreach)
    # one group per device mesh (2-D FSDP x TP puts the split layers on a 2-D mesh and the rest
    # on the FSDP mesh), plain tensors on their own
    groups: dict[object, list[torch.Tensor]] = {}
    for p in params:
        groups.setdefault(p.device_mesh if _is_dtensor(p) else None, []).append(p)
    if len(groups) == 1 and None not in groups:
        return _full(nn.utils.clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite,
                                              foreach))
    norms = [_full(nn.utils.get_total_norm([p.grad for p in group], norm_type, error_if_nonfinite,
                                           foreach)) for group in groups.values()]
    total = torch.linalg.vector_norm(torch.stack([n.float() for n in norms]), norm_type)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for group in groups.values():
        for p in group:
            # scaling every shard by the same factor scales the whole gradient
            grad = p.grad.to_local() if _is_dtensor(p.grad) else p.grad
            grad.mul_(coef.to(grad.device, grad.dtype))
    return total
