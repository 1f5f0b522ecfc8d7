"""Transforms: callables that take a dataset item (a dict) and return the transformed item.

A dataset's ``transform`` argument may be one transform, a config dict built with ``TRANSFORMS``,
or a list of either (applied in order, see :class:`Compose`)::

    transform=[dict(type="RandomShift", max_shift=1), dict(type="RandomNoise", std=0.05)]

The random transforms here draw from torch's *global* RNG, so ``torch.manual_seed`` (or
per-sample seeding, see ``libai/data/seeded.py``) makes them reproducible.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from libai.registry import TRANSFORMS
from libai.utils.errors import DataError

__all__ = ["Compose", "RandomNoise", "RandomShift", "build_transform"]

Transform = Callable[[dict[str, Any]], dict[str, Any]]


def build_transform(spec: Any) -> Transform | None:
    """Turn a transform spec into one callable.

    Args:
        spec: None, a callable, a config dict with ``type``, or a list of those.

    Returns:
        The callable, or None for None or an empty list.

    Raises:
        DataError: ``spec`` is none of these.
    """
    if spec is None:
        return None
    if isinstance(spec, Mapping):
        return TRANSFORMS.build(spec)
    if isinstance(spec, Sequence) and not isinstance(spec, str):
        return Compose(spec) if len(spec) else None
    if callable(spec):
        return spec
    raise DataError(
        f"A transform must be a callable, a dict with 'type' or a list of those; "
        f"got {type(spec).__name__} {spec!r}."
    )


@TRANSFORMS.register_module()
class Compose:
    """Apply transforms in order.

    Args:
        transforms: Callables or ``TRANSFORMS`` config dicts.
    """

    def __init__(self, transforms: Sequence[Any]) -> None:
        self.transforms: list[Transform] = []
        for t in transforms:
            built = build_transform(t)
            if built is not None:
                self.transforms.append(built)

    def __call__(self, item: dict[str, Any]) -> dict[str, Any]:
        for t in self.transforms:
            item = t(item)
        return item

    def __repr__(self) -> str:
        return f"Compose({self.transforms!r})"


def _get(item: dict[str, Any], key: str, name: str) -> torch.Tensor:
    if key not in item:
        raise DataError(f"{name}: the item has no key '{key}' (keys: {sorted(item)}).")
    return item[key]


@TRANSFORMS.register_module()
class RandomShift:
    """Translate a flattened or 2-D image by a random whole number of pixels, filling with zeros.

    The shift along each axis is uniform in ``[-max_shift, max_shift]``.

    Args:
        max_shift: Largest shift in pixels. Defaults to 1.
        image_shape: (height, width) of the image, used to unflatten ``(H * W,)`` inputs.
            Defaults to (8, 8), the digits images.
        key: The item key holding the image. Defaults to "inputs".
    """

    def __init__(
        self, max_shift: int = 1, image_shape: tuple[int, int] = (8, 8), key: str = "inputs"
    ) -> None:
        if max_shift < 0:
            raise DataError(f"RandomShift: max_shift must be >= 0, got {max_shift}.")
        self.max_shift = int(max_shift)
        self.image_shape = tuple(image_shape)
        self.key = key

    def __call__(self, item: dict[str, Any]) -> dict[str, Any]:
        x = _get(item, self.key, "RandomShift")
        h, w = self.image_shape
        img = x.reshape(*x.shape[:-1], h, w) if x.shape[-2:] != (h, w) else x
        dy, dx = torch.randint(-self.max_shift, self.max_shift + 1, (2,)).tolist()
        out = torch.zeros_like(img)
        if abs(dy) >= h or abs(dx) >= w:  # shifted out of the frame entirely
            return {**item, self.key: out.reshape(x.shape)}
        # Destination and source windows of the shift.
        ys, yd = slice(max(-dy, 0), h - max(dy, 0)), slice(max(dy, 0), h - max(-dy, 0))
        xs, xd = slice(max(-dx, 0), w - max(dx, 0)), slice(max(dx, 0), w - max(-dx, 0))
        out[..., yd, xd] = img[..., ys, xs]
        return {**item, self.key: out.reshape(x.shape)}

    def __repr__(self) -> str:
        return f"RandomShift(max_shift={self.max_shift}, image_shape={self.image_shape})"


@TRANSFORMS.register_module()
class RandomNoise:
    """Add Gaussian noise, optionally clamping the result.

    Args:
        std: Standard deviation of the noise. Defaults to 0.05.
        clamp: (low, high) to clamp to after adding noise, or None. Defaults to (0.0, 1.0), the
            range of normalised digits inputs.
        key: The item key holding the tensor. Defaults to "inputs".
    """

    def __init__(
        self,
        std: float = 0.05,
        clamp: tuple[float, float] | None = (0.0, 1.0),
        key: str = "inputs",
    ) -> None:
        if std < 0:
            raise DataError(f"RandomNoise: std must be >= 0, got {std}.")
        self.std = float(std)
        self.clamp = tuple(clamp) if clamp is not None else None
        self.key = key

    def __call__(self, item: dict[str, Any]) -> dict[str, Any]:
        x = _get(item, self.key, "RandomNoise")
        y = x + torch.randn(x.shape, dtype=x.dtype) * self.std
        if self.clamp is not None:
            y = y.clamp(*self.clamp)
        return {**item, self.key: y}

    def __repr__(self) -> str:
        return f"RandomNoise(std={self.std}, clamp={self.clamp})"
