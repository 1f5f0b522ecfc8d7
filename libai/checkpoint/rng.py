"""Random number generator state as plain checkpoint data, and back.

Python's and numpy's states are tuples holding arrays and objects that ``torch.load(...,
weights_only=True)`` cannot restore as they are, so they are stored as lists, numbers and int64
tensors. The state is per process: in a distributed run each rank has its own.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from libai.utils.errors import CheckpointError
from libai.utils.suggest import did_you_mean

__all__ = ["get_rng_state", "set_rng_state"]

_KEYS = ("python", "numpy", "torch", "cuda")


def _as_list(values: Any) -> list:
    """A tensor's values as Python numbers; a list (older checkpoints) as is."""
    return values.tolist() if isinstance(values, torch.Tensor) else list(values)


def get_rng_state() -> dict[str, Any]:
    """Capture the global generators: Python ``random``, numpy, torch CPU and every CUDA device.

    Returns:
        ``{"python": {...}, "numpy": {...}, "torch": uint8 tensor, "cuda": [uint8 tensor, ...]}``;
        ``"cuda"`` is present only when CUDA is available. Everything in it saves with
        :func:`~libai.checkpoint.save_checkpoint`.
    """
    version, internal, gauss_next = random.getstate()
    name, keys, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        # 625 words as one int64 tensor: a list of ints costs a checkpoint save a pickle call each
        "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64),
                   "gauss_next": gauss_next},
        "numpy": {
            "bit_generator": str(name),
            # uint32 words widened to int64 so that every torch version can hold them.
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore generators captured by :func:`get_rng_state`; parts that are absent are left as is.

    CUDA states are restored for as many devices as both the saved state and this machine have.

    Args:
        state: As returned by :func:`get_rng_state` (possibly after a save/load round trip).

    Raises:
        CheckpointError: ``state`` has an unknown part or a malformed one.
    """
    if not isinstance(state, dict):
        raise CheckpointError(f"RNG state must be a dict, got {type(state).__name__}.")
    for key in state:
        if key not in _KEYS:
            raise CheckpointError(
                f"Unknown RNG state part '{key}'; expected some of {list(_KEYS)}."
                + did_you_mean(str(key), _KEYS)
            )
    try:
        if "python" in state:
            py = state["python"]
            random.setstate(
                (int(py["version"]), tuple(int(x) for x in _as_list(py["state"])), py["gauss_next"])
            )
        if "numpy" in state:
            npy = state["numpy"]
            keys = torch.as_tensor(npy["keys"]).cpu().numpy().astype(np.uint32)
            np.random.set_state(
                (
                    npy["bit_generator"],
                    keys,
                    int(npy["pos"]),
                    int(npy["has_gauss"]),
                    float(npy["cached_gaussian"]),
                )
            )
        if "torch" in state:
            torch.set_rng_state(state["torch"].cpu())
        if "cuda" in state and torch.cuda.is_available():
            saved = list(state["cuda"])
            for device in range(min(len(saved), torch.cuda.device_count())):
                torch.cuda.set_rng_state(saved[device].cpu(), device)
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise CheckpointError(
            f"RNG state is malformed ({type(e).__name__}: {e}); it must come from get_rng_state()."
        ) from e
