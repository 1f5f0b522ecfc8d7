"""The default steps the engine runs for a model, and the optional ``BaseModel``.

What a model offers the engine is listed in :mod:`libai.model.contract`; this module holds the
code that uses it: moving a batch (``data_preprocessor`` or :func:`to_device`), calling the model,
summing its losses (:func:`parse_losses`) and updating, for any ``nn.Module``. ``BaseModel`` adds
overridable ``train_step``/``val_step``/``test_step`` and a data preprocessor; the runner calls
the same default steps for a plain module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
from torch import nn

from libai.utils.dist import DataParallel
from libai.utils.errors import TrainingError

from .contract import mean_over_data_parallel
from .execution import unwrap_model  # noqa: F401 - public here too (libai.model.unwrap_model)

__all__ = [
    "BaseModel",
    "DataPreprocessor",
    "make_train_step",
    "parse_losses",
    "to_device",
    "train_step",
    "val_step",
    "test_step",
    "unwrap_model",
]


def to_device(data: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """Move every tensor in a nested dict/list/tuple to ``device``.

    A tensor already there is returned as is (like ``Tensor.to``); on the CPU that is decided
    without a call into torch, which matters on the per-step path.
    """
    device = torch.device(device) if isinstance(device, str) else device
    return _to(data, device, device.type == "cpu", non_blocking)


def _to(data: Any, device: torch.device, cpu: bool, non_blocking: bool) -> Any:
    if isinstance(data, torch.Tensor):
        return data if cpu and data.is_cpu else data.to(device, non_blocking=non_blocking)
    if isinstance(data, dict):  # the usual batch: one level of tensors, no recursion for them
        return {
            k: (v if cpu and v.is_cpu else v.to(device, non_blocking=non_blocking))
            if isinstance(v, torch.Tensor) else _to(v, device, cpu, non_blocking)
            for k, v in data.items()
        }
    if isinstance(data, Mapping):
        return {k: _to(v, device, cpu, non_blocking) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(_to(v, device, cpu, non_blocking) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(_to(v, device, cpu, non_blocking) for v in data)
    return data


class DataPreprocessor(nn.Module):
    """Moves a batch to the model's device. Subclass it to normalise or augment on the device.

    Args:
        non_blocking: Use asynchronous copies. Defaults to None: asynchronous to an accelerator
            (a blocking host-to-device copy waits for the device: a sync per step), as
            ``to_device``'s callers in the train step do; pinned memory
            (``train_dataloader.pin_memory=True``) makes the copy itself overlap.
    """

    def __init__(self, non_blocking: bool | None = None) -> None:
        super().__init__()
        self.non_blocking = non_blocking
        self.register_buffer("_device_probe", torch.empty(0), persistent=False)

    def forward(self, data: Any, training: bool = False) -> Any:
        device = self._device_probe.device
        non_blocking = self.non_blocking
        if non_blocking is None:  # to an accelerator: queued on the stream the forward runs on
            non_blocking = device.type != "cpu"
        return to_device(data, device, non_blocking)


def parse_losses(outputs: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Turn what a model returns in train mode into (total loss, detached values to log).

    A tensor is the loss. In a dict, entries whose key contains ``loss`` are summed into the loss
    (a tensor with several elements is averaged first); every tensor entry is logged.
    """
    if isinstance(outputs, torch.Tensor):
        loss = outputs if outputs.ndim == 0 else outputs.mean()
        return loss, {"loss": loss.detach()}
    if not isinstance(outputs, (dict, Mapping)):  # dict first: an ABC check is slower
        raise TrainingError(
            f"In train mode the model returned {type(outputs).__name__}; it must return a loss "
            f"tensor or a dict with at least one '*loss*' entry, e.g. {{'loss': loss}}."
        )
    log_vars: dict[str, torch.Tensor] = {}
    loss = total_log = more = None  # the usual single loss entry needs no list
    for key, value in outputs.items():
        if not isinstance(value, torch.Tensor):
            if not isinstance(value, (list, tuple)):
                continue
            value = sum(v.mean() for v in value)
        if value.ndim:  # a property: cheaper than dim() on the per-step path
            value = value.mean()
        # the logger keeps these for a whole interval: never a reference into the graph
        if "loss" in key:
            log_vars[key] = detached = value.detach()
            if loss is None:
                loss, total_log = value, detached
            elif more is None:
                more = [loss, value]
            else:
                more.append(value)
        else:
            log_vars[key] = value.detach() if value.requires_grad else value
    if loss is None:
        raise TrainingError(
            f"In train mode the model returned a dict with keys {sorted(outputs)}, none of which "
            f"contains 'loss'. Name the loss entry 'loss' (or 'loss_xxx'; all are summed)."
        )
    if more is not None:
        loss = torch.stack(more).sum()
        log_vars["loss"] = loss.detach()
    elif "loss" not in log_vars:  # a single 'loss_xxx' entry: it is the total
        log_vars["loss"] = total_log
    return loss, log_vars


def _mover(model: nn.Module, training: bool, device: torch.device | str | None) -> Any:
    """What moves a batch for ``model``: its data preprocessor, ``to_device``, or None.

    None when the model has no preprocessor and ``device`` is the CPU: a data loader yields CPU
    tensors, so there is nothing to move (a plain PyTorch loop on the CPU moves nothing either).
    """
    # looked up in the module's dicts: a missing attribute on an nn.Module goes through
    # __getattr__ and an exception
    pre = model._modules.get("data_preprocessor") or model.__dict__.get("data_preprocessor")
    if pre is not None:
        return lambda data: pre(data, training)
    if device is None:
        param = next(model.parameters(), None)
        if param is None:
            return None
        device = param.device
    device = torch.device(device)
    if device.type == "cpu":
        return None
    # asynchronous: a blocking host-to-device copy waits for the device's queue, a sync per
    # step (torch.cuda.set_sync_debug_mode flags it); the stream orders it before the forward
    return partial(to_device, device=device, non_blocking=True)


def make_train_step(model: nn.Module, forward: nn.Module | None = None,
                    device: torch.device | str | None = None,
                    data_parallel: DataParallel | None = None) -> Callable[[Any, Any], dict]:
    """``train_step`` for ``model`` with its per-run decisions made once.

    ``make_train_step(model, forward, device)(data, optim_wrapper)`` does exactly what
    ``train_step(model, data, optim_wrapper, forward, device)`` does; the runner calls it every
    iteration, so finding the preprocessor and the device happens here, not per step.
    ``data_parallel``: how the processes split the data, for losses that declare ``num_items``
    (:func:`mean_over_data_parallel`). Defaults to None: one share.
    """
    forward = forward if forward is not None else model
    move = _mover(model, True, device)
    previous: list[Any] = [None]
    shares = data_parallel if data_parallel is not None and data_parallel.size > 1 else None

    def step(data: Any, optim_wrapper: Any) -> dict:
        if move is not None:
            data = move(data)
        if getattr(optim_wrapper, "plain_forward", False) and optim_wrapper.accumulative_counts == 1:
            outputs = forward(data)  # the usual case: optim_context would be a null context
        else:
            with optim_wrapper.optim_context(forward):
                outputs = forward(data)
        if shares is not None:
            outputs = mean_over_data_parallel(outputs, shares)
        # parse_losses(outputs), inlined for the usual dict of 0-d tensors with one 'loss'
        # entry (a call less per step); anything else goes to parse_losses itself
        loss = None
        if type(outputs) is dict:
            log_vars = {}
            for key, value in outputs.items():
                if type(value) is not torch.Tensor or value.ndim or (key != "loss" and "loss" in key):
                    loss = None
                    break
                if key == "loss":
                    loss = value
                    log_vars[key] = value.detach()
                else:
                    log_vars[key] = value.detach() if value.requires_grad else value
        if loss is None:
            loss, log_vars = parse_losses(outputs)
        optim_wrapper.update_params(loss)
        # Held until the next step has run its forward, as `loss = model(batch)` in a
        # hand-written loop holds it: this step's graph (its buffers already freed by backward)
        # keeps autograd's per-parameter gradient accumulators alive, so the next forward
        # reuses them instead of building and destroying one per parameter every step.
        previous[0] = loss
        return log_vars

    return step


def train_step(model: nn.Module, data: Any, optim_wrapper: Any, forward: nn.Module | None = None,
               device: torch.device | str | None = None) -> dict:
    """One optimisation step for a plain module: preprocess, forward, parse losses, update.

    Args:
        model: The unwrapped model (owns the data preprocessor).
        data: A batch from the data loader.
        optim_wrapper: Does backward, accumulation, clipping and the step.
        forward: The module to call (the DDP or compiled wrapper). Defaults to ``model``.
        device: Where the batch goes. Defaults to the device of the model's first parameter.
            On the CPU a batch is not moved.

    Returns:
        The detached values to log.
    """
    return make_train_step(model, forward, device)(data, optim_wrapper)


@torch.no_grad()
def val_step(model: nn.Module, data: Any, forward: nn.Module | None = None,
             device: torch.device | str | None = None) -> Any:
    """Preprocess and forward a batch in eval mode; returns what the metrics consume."""
    forward = forward if forward is not None else model
    move = _mover(model, False, device)
    return forward(data if move is None else move(data))


test_step = val_step


class BaseModel(nn.Module):
    """Optional base class: overridable steps and a data preprocessor.

    Override ``train_step`` for a custom update (GANs, several optimizers); call ``forward(...)``,
    not ``self(...)``, inside it, since ``forward`` is the DDP/compiled wrapper when there is one.

    Args:
        data_preprocessor: A module (or None for :class:`DataPreprocessor`) applied to each batch
            before ``forward``. Defaults to None.
    """

    def __init__(self, data_preprocessor: nn.Module | None = None) -> None:
        super().__init__()
        self.data_preprocessor = data_preprocessor or DataPreprocessor()

    def train_step(self, data: Any, optim_wrapper: Any, forward: nn.Module | None = None) -> dict:
        return train_step(self, data, optim_wrapper, forward)

    def val_step(self, data: Any, forward: nn.Module | None = None) -> Any:
        return val_step(self, data, forward)

    def test_step(self, data: Any, forward: nn.Module | None = None) -> Any:
        return test_step(self, data, forward)
