"""Drawing image items: a near-square grid of the samples, each titled with its label and index
(how the image shape is found is told in :mod:`libai.analysis.browse`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from libai.utils.errors import DataError

from .browse_sample import key_index

__all__ = ["draw_images", "item_label", "to_image"]

_LABEL_KEYS = ("labels", "label", "gt_label", "targets", "target")


def to_image(inputs: Any, shape: Sequence[int] | None = None) -> np.ndarray:
    """An (H, W) or (H, W, C) float array from an item's ``inputs``.

    Args:
        inputs: A 2-D or 3-D tensor, or a flat vector.
        shape: The shape of a flat vector's image (``metainfo["image_shape"]``). Defaults to
            None: a square.

    Raises:
        DataError: the shape cannot be found or does not fit.
    """
    x = torch.as_tensor(inputs).detach().to("cpu", torch.float32)
    if x.ndim == 1:
        if shape is None:
            side = math.isqrt(x.numel())
            if side * side != x.numel():
                raise DataError(
                    f"A flat input of {x.numel()} values is not a square image and the dataset's "
                    f"metainfo has no 'image_shape': cannot draw it."
                )
            shape = (side, side)
        if math.prod(shape) != x.numel():
            raise DataError(f"metainfo image_shape {tuple(shape)} does not fit an input of "
                            f"{x.numel()} values.")
        x = x.reshape(tuple(int(s) for s in shape))
    if x.ndim == 3:
        first, last = x.shape[0] in (1, 3, 4), x.shape[-1] in (1, 3, 4)
        if first and (not last or x.shape[0] <= x.shape[-1]):  # (C, H, W), torch's layout
            x = x.permute(1, 2, 0)
        elif not last:
            raise DataError(f"An image of shape {tuple(x.shape)}: expected (C, H, W) or "
                            f"(H, W, C) with 1, 3 or 4 channels.")
        if x.shape[-1] == 1:
            x = x[..., 0]
    if x.ndim not in (2, 3):
        raise DataError(f"Cannot draw an input of shape {tuple(x.shape)} as an image.")
    return x.numpy()


def item_label(item: Mapping, meta: Mapping) -> str | None:
    """The item's label as text: the class name when ``metainfo['classes']`` has it."""
    for key in _LABEL_KEYS:
        value = item.get(key)
        if value is None:
            continue
        value = torch.as_tensor(value)
        if value.numel() != 1:
            return None
        label = value.item()
        classes = meta.get("classes")
        if isinstance(label, int) and classes is not None and 0 <= label < len(classes):
            return str(classes[label])
        return f"{label:g}" if isinstance(label, float) else str(label)
    return None


def draw_images(samples: Sequence[tuple[Any, Mapping]], meta: Mapping | None = None,
                title: str | None = None) -> Any:
    """A matplotlib Figure (Agg canvas): one titled axes per sample, in a near-square grid.

    Args:
        samples: ``(sampler key, item)`` pairs, as :func:`sample_items` returns them.
        meta: The dataset's metainfo (``image_shape``, ``classes``). Defaults to None.
        title: The figure's title. Defaults to None.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    meta = dict(meta or {})
    shape = meta.get("image_shape")
    n = len(samples)
    ncols = math.ceil(math.sqrt(n))
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(1.6 * ncols, 1.7 * nrows + (0.4 if title else 0)), layout="constrained")
    FigureCanvasAgg(fig)
    for i, (key, item) in enumerate(samples):
        image = to_image(item["inputs"], shape)
        ax = fig.add_subplot(nrows, ncols, i + 1)
        lo, hi = float(image.min()), float(image.max())
        if image.ndim == 3:  # colour: show as is when in [0, 1], else stretched per image
            image = image if lo >= 0 and hi <= 1 else (image - lo) / max(hi - lo, 1e-12)
            ax.imshow(image, interpolation="nearest")
        else:
            in_unit = lo >= 0 and hi <= 1
            ax.imshow(image, cmap="gray", interpolation="nearest",
                      vmin=0 if in_unit else lo, vmax=1 if in_unit else hi)
        label = item_label(item, meta)
        index = key_index(key)
        ax.set_title(f"{label}  #{index}" if label is not None else f"#{index}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
