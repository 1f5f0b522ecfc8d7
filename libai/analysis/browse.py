"""Look at a config's data before training: sample items of one split, then plot them.

    libai browse CONFIG [--split train|val|test] [-n 16] [--out FILE]
        [--set NAME] [--seed S] [--cfg-options key=value ...] [--debug]

The split's data loader is built from the config as the runner builds it (dataset, transforms,
sampler; no model, no optimizer), and the first N keys its sampler yields in epoch 0 (on one
process: what training would read first) are loaded from its dataset, after the transforms.
The sampler's key is what the dataset takes: a plain index, or a ``SampleKey`` with
``seed_per_sample=True`` (the text configs), which fixes the masks and pairs of a sample.
Random transforms that draw from the global RNGs are seeded with ``--seed`` (default: the
config's ``randomness.seed``, else 0).

What is drawn depends on the items:

- Images: an item whose ``inputs`` tensor is 2-D (H, W), 3-D ((C, H, W) or (H, W, C) with 1,
  3 or 4 channels) or a flat vector. The image shape is found in this order: the tensor's own
  shape when it is 2-D or 3-D; ``dataset.metainfo["image_shape"]`` for a flat vector
  (``DigitsDataset`` says (8, 8): its 64 pixels are flattened row by row); else a square when
  the length is a perfect square. The grid is written as a PNG, each image titled with its
  label (the class name from ``metainfo["classes"]`` when there is one) and dataset index.
- Text: an item with ``input_ids``. The tokens are decoded with the dataset's tokenizer (the
  text datasets expose it as ``dataset.corpus.tokenizer``; a ``tokenizer`` attribute or the
  file named by ``metainfo["tokenizer"]`` also serve). An HTML table gets one row per sample:
  for BERT samples the text with each predicted position marked ``<mark>[MASK]→original</mark>``
  (from ``mlm_positions``/``mlm_labels``; a token replaced at random or kept shows
  ``token→original``) and the next-sentence label; for GPT samples the input and the labels it
  is trained to predict (the input shifted by one token). A short plain-text version is
  printed to the console.

The output goes to ``--out`` or ``browse_<config stem>_<split>.png|.html`` in the current folder.
``libai browse`` and ``python tools/browse_dataset.py`` are parsers around :func:`browse`.

This module is the driver; sampling is :mod:`libai.analysis.browse_sample`, the image grid
:mod:`libai.analysis.browse_images` and the text tables :mod:`libai.analysis.browse_text`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from libai.utils.errors import DataError

# the parts: sampling a split, drawing images, showing text; all their names are importable here
from .browse_images import draw_images, item_label, to_image  # noqa: F401
from .browse_sample import (  # noqa: F401
    SPLITS,
    key_index,
    load_config,
    loader_section,
    metainfo,
    sample_items,
    sample_split,
)
from .browse_text import (  # noqa: F401
    find_tokenizer,
    pieces_html,
    pieces_text,
    print_table,
    render_tokens,
    text_rows,
    write_html,
)

__all__ = [
    "SPLITS",
    "browse",
    "draw_images",
    "find_tokenizer",
    "item_kind",
    "load_config",
    "metainfo",
    "sample_split",
    "text_rows",
    "write_html",
]


def item_kind(item: Any) -> str:
    """'image' or 'text' for an item (a dict of tensors); a DataError otherwise."""
    if isinstance(item, Mapping):
        if "input_ids" in item:
            return "text"
        inputs = item.get("inputs")
        if isinstance(inputs, (torch.Tensor, np.ndarray)) and np.ndim(inputs) in (1, 2, 3):
            return "image"
        keys = ", ".join(f"{k}: {tuple(np.shape(v))}" for k, v in item.items())
    else:
        keys = type(item).__name__
    raise DataError(
        f"Cannot draw these items ({keys}): browse_dataset draws images (an 'inputs' tensor, "
        f"2-D, 3-D or a flat vector) and text ('input_ids')."
    )


def browse(config: str, split: str = "train", n: int = 16, out: str | os.PathLike | None = None,
           cfg_options: Mapping[str, Any] | None = None, set_name: str | None = None,
           seed: int | None = None) -> Path:
    """Sample ``n`` items of ``split`` and write the picture grid or the HTML table.

    Returns:
        The file written.

    Raises:
        ConfigError: a bad split, set, count or config.
        DataError: items that are neither images nor text, or text without a tokenizer.
    """
    cfg = load_config(config, cfg_options)
    dataset, samples, key = sample_split(cfg, split, n, set_name, seed)
    kind = item_kind(samples[0][1])
    stem = Path(str(cfg.filename or config)).stem
    size = len(dataset) if hasattr(dataset, "__len__") else "?"
    title = f"{stem} · {key} · {len(samples)} of {size} samples"
    if out is None:
        out = f"browse_{stem}_{split}.{'png' if kind == 'image' else 'html'}"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "image":
        fig = draw_images(samples, metainfo(dataset), title)
        fig.savefig(out, dpi=100)
    else:
        table = text_rows(dataset, samples, find_tokenizer(dataset))
        write_html(table, out, title)
        print_table(table, title)
    print(f"Wrote {out} ({len(samples)} {kind} samples of {key})")
    return out
