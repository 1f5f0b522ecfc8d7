"""What a checkpoint may hold, checked before anything is written.

A checkpoint must load with ``torch.load(..., weights_only=True)``, which refuses arbitrary Python
objects. Checking at save time turns "the resume fails next week" into an error now that names the
offending entry by its key path (``hooks.MyHook.fn: function``).
"""

from __future__ import annotations

import types
from collections import OrderedDict
from typing import Any

import numpy as np
import torch

from libai.utils.errors import CheckpointError

__all__ = ["check_state", "copy_state_to_host"]

_LEAF_TYPES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)
_LEAF_SET = frozenset(_LEAF_TYPES)
_KEY_TYPES = (type(None), bool, int, float, str)
_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)
# .item() of these gives a Python number/str/bytes; of np.datetime64 it would give a datetime.
_NUMPY_SCALARS = (np.number, np.bool_, np.str_, np.bytes_)
_ALLOWED = (
    "tensors, numbers, strings, bytes, bools, None, torch.dtype/device/Size and "
    "lists/tuples/dicts of them"
)


def check_state(state: dict[str, Any]) -> dict[str, Any]:
    """Check that ``state`` can be saved and loaded back safely.

    Numpy scalars (``np.float32(1.0)``) are converted to Python numbers; everything else is kept
    as is (tensors are not copied).

    Args:
        state: The checkpoint content.

    Returns:
        The state with numpy scalars converted; containers are rebuilt with the same types.

    Raises:
        CheckpointError: An entry has an unsupported type; the message names its key path.
    """
    return _Walker(copy_tensors=False).root(state)


def copy_state_to_host(state: dict[str, Any]) -> dict[str, Any]:
    """Like :func:`check_state`, and every tensor is copied to CPU memory.

    The copy does not share memory with the originals, so training may change them while the copy
    is written. A tensor that appears twice in ``state`` is copied once and stays shared.

    Args:
        state: The checkpoint content.

    Returns:
        A new state whose tensors are CPU copies.
    """
    return _Walker(copy_tensors=True).root(state)


def _describe_type(obj: Any) -> str:
    if isinstance(obj, types.FunctionType | types.BuiltinFunctionType | types.MethodType):
        return "function"
    cls = type(obj)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _join(path: str, key: Any) -> str:
    if isinstance(key, str):
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


class _Walker:
    def __init__(self, copy_tensors: bool) -> None:
        self.copy_tensors = copy_tensors
        self.copies: dict[int, torch.Tensor] = {}
        self.on_path: set[int] = set()

    def root(self, state: Any) -> dict[str, Any]:
        if not isinstance(state, dict):
            raise CheckpointError(
                f"A checkpoint must be a dict, got {_describe_type(state)}. Wrap the content, "
                "e.g. {'model': model.state_dict()}."
            )
        return self.walk(state, "")

    def fail(self, path: str, obj: Any, hint: str = "", detail: str = "") -> CheckpointError:
        where = path or "<root>"
        return CheckpointError(
            f"Cannot save checkpoint entry {where}: {_describe_type(obj)}{detail}. A checkpoint "
            "holds only "
            f"{_ALLOWED}, so that it loads without running code (torch.load(weights_only=True)). "
            + (hint or "Store plain data instead (a name, a number, a state_dict()).")
        )

    def walk(self, obj: Any, path: str) -> Any:
        if type(obj) in _TENSOR_TYPES:
            return self.tensor(obj)
        if isinstance(obj, torch.Tensor):
            raise self.fail(path, obj, "Convert tensor subclasses to a plain tensor first.")
        if isinstance(obj, torch.Size):
            return obj
        if type(obj) in _LEAF_TYPES:
            return obj
        if isinstance(obj, _NUMPY_SCALARS):
            return obj.item()
        if isinstance(obj, np.ndarray):
            raise self.fail(
                path,
                obj,
                "Convert it with torch.from_numpy(x) or x.tolist() before saving.",
                detail=f" (shape {tuple(obj.shape)}, dtype {obj.dtype})",
            )
        if type(obj) in (dict, OrderedDict, list, tuple):
            if id(obj) in self.on_path:
                raise CheckpointError(
                    f"Cannot save checkpoint entry {path or '<root>'}: it contains itself (a "
                    "reference cycle)."
                )
            self.on_path.add(id(obj))
            try:
                return self.container(obj, path)
            finally:
                self.on_path.discard(id(obj))
        raise self.fail(path, obj)

    def container(self, obj: Any, path: str) -> Any:
        if isinstance(obj, dict):
            out = type(obj)()
            for key, value in obj.items():
                key = self.key(key, path)
                out[key] = self.walk(value, _join(path, key))
            return out
        if all(type(v) in _LEAF_SET for v in obj):  # a history of numbers: no path per item
            return type(obj)(obj)
        items = [self.walk(v, _join(path, i)) for i, v in enumerate(obj)]
        return type(obj)(items)

    def key(self, key: Any, path: str) -> Any:
        if isinstance(key, _NUMPY_SCALARS):
            key = key.item()
        if type(key) in _KEY_TYPES:
            return key
        if type(key) is tuple and all(type(k) in _KEY_TYPES for k in key):
            return key
        raise CheckpointError(
            f"Cannot save checkpoint entry {path or '<root>'}: it has a key {key!r} of type "
            f"{_describe_type(key)}. Dict keys must be strings, numbers, bools or None."
        )

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        if not self.copy_tensors:
            return t
        found = self.copies.get(id(t))
        if found is None:
            src = t.detach()
            # .to("cpu") already copies from an accelerator; a CPU tensor needs an explicit clone.
            found = src.clone() if src.device.type == "cpu" else src.to("cpu")
            self.copies[id(t)] = found
        return found
