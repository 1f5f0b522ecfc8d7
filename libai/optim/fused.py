"""Which implementation a torch optimizer runs: fused CUDA kernels when every parameter is on CUDA.

torch's Adam, AdamW and SGD (and their subclasses) default to ``foreach`` on
CUDA: one kernel per operation over all parameters. ``fused=True`` does the whole update in one
kernel per parameter group, and keeps the step counter on the device, so the update reads
nothing back from the GPU; under float16 the GradScaler then hands the optimizer its inf check as
a tensor instead of reading it (a device sync per step otherwise). torch does not choose fused by
itself ("we want to give the fused impl bake-in time", torch/optim/adam.py), so the constructor
asks for it here.

The rule, applied when ``optim_wrapper.optimizer`` is a dict (a built optimizer is driven as is):

- ``fused`` or ``foreach`` in the config: as written, always.
- every parameter a floating-point tensor on CUDA, all plain tensors or all DTensors on one mesh
  (FSDP2; torch registers the fused kernels for DTensor): ``fused=True``.
- a mix of plain tensors and DTensors, or DTensors on several meshes (tensor parallel leaves
  both): neither the fused nor the foreach kernels take one list of them, so ``foreach=False``.
- graph mode (the wrapper compiles the update): torch's default; inductor makes its own kernels
  from the foreach update.
- parameters elsewhere (CPU): torch's default.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

import torch

__all__ = ["choose_implementation", "device_types"]


def device_types(params: Iterable[torch.Tensor]) -> set[str]:
    """The device types of ``params`` (``{"cuda"}``, ``{"cpu"}``...): what the choice reads."""
    return {p.device.type for p in params}


def _meshes(params: list[torch.Tensor]) -> tuple[int, set[int]]:
    """(number of DTensors, ids of their meshes)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return 0, set()
    dtensors = [p for p in params if isinstance(p, DTensor)]
    return len(dtensors), {id(p.device_mesh) for p in dtensors}


# the torch optimizers whose fused kernels run on CUDA in every torch libai supports (Adagrad's
# fused kernel was CPU-only): a subclass of one of these (or a class of one's own taking
# ``fused``) is asked for it only through the config
_FUSED_ON_CUDA = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)


def _takes_fused(optimizer_cls: Any) -> bool:
    if not (isinstance(optimizer_cls, type) and issubclass(optimizer_cls, _FUSED_ON_CUDA)):
        return False
    try:
        return "fused" in inspect.signature(optimizer_cls).parameters
    except (TypeError, ValueError):
        return False


def choose_implementation(optimizer_cls: Any, cfg: Mapping[str, Any], params: Any,
                          compiled: bool = False) -> tuple[dict[str, Any], str | None]:
    """What to add to the optimizer's arguments, and the log line that says why.

    Args:
        optimizer_cls: The optimizer class the config names.
        cfg: ``optim_wrapper.optimizer`` (read only: ``fused``, ``foreach``, ``differentiable``).
        params: The parameters or parameter groups the optimizer gets.
        compiled: The wrapper compiles the update (graph mode).

    Returns:
        ``({"fused": True}, line)``, ``({"foreach": False}, line)`` or ``({}, line)``; the line
        is None for an optimizer other than Adam, AdamW and SGD (and their subclasses).
    """
    name = getattr(optimizer_cls, "__name__", str(optimizer_cls))
    if not _takes_fused(optimizer_cls):
        return {}, None
    given = {k: cfg[k] for k in ("fused", "foreach") if cfg.get(k) is not None}
    if given:
        said = ", ".join(f"{k}={v}" for k, v in given.items())
        return {}, f"Optimizer: {name} with {said} (as optim_wrapper.optimizer says)"
    flat = [p for g in params for p in (g["params"] if isinstance(g, Mapping) else [g])]
    change = "set optim_wrapper.optimizer.fused=True/False or foreach=... to change"
    if cfg.get("differentiable") or not flat:
        return {}, None
    kinds = device_types(flat)
    if kinds != {"cuda"} or not all(torch.is_floating_point(p) for p in flat):
        where = ", ".join(sorted(kinds))
        return {}, f"Optimizer: {name} with torch's default kernels (parameters on {where}; {change})"
    if compiled:
        return {}, (f"Optimizer: {name} with torch's default kernels (graph mode compiles the "
                    f"update into kernels of its own; {change})")
    n_dtensors, meshes = _meshes(flat)
    if n_dtensors and (n_dtensors != len(flat) or len(meshes) > 1):
        return {"foreach": False}, (
            f"Optimizer: {name} single-tensor (the parameters mix sharded DTensors and plain "
            f"tensors, or several device meshes, which neither the fused nor the foreach kernels "
            f"take in one list; {change})")
    return {"fused": True}, (
        f"Optimizer: {name} fused (every parameter on CUDA; set "
        f"optim_wrapper.optimizer.fused=False to change)")
