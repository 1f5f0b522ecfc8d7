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
"""

from __future__ import annotations

import html
import itertools
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from libai.config import Config
from libai.runner.build import build_loader
from libai.runner.env import seed_everything
from libai.runner.imports import import_custom_modules
from libai.utils.dist import DataParallel
from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import did_you_mean

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

SPLITS = ("train", "val", "test")
_IGNORE = -100  # label of a position that is not predicted
_LABEL_KEYS = ("labels", "label", "gt_label", "targets", "target")


# ------------------------------------------------------------------------------- sampling
def load_config(path: str, cfg_options: Mapping[str, Any] | None = None) -> Config:
    """The config with its ``--cfg-options`` merged and its ``custom_imports`` imported."""
    cfg = Config.fromfile(path)
    import_custom_modules(cfg.get("custom_imports"), cfg.filename)  # the Runner does it too
    cfg.merge_from_options(dict(cfg_options or {}))
    return cfg


def loader_section(cfg: Any, split: str, set_name: str | None = None) -> tuple[Any, str]:
    """The data loader config of ``split`` (one set of several: ``set_name``, else the first)
    and its config key."""
    if split not in SPLITS:
        raise ConfigError(f"Unknown split '{split}': choose from {', '.join(SPLITS)}.")
    key = f"{split}_dataloader"
    section = cfg.get(key)
    if section is None:
        present = [s for s in SPLITS if cfg.get(f"{s}_dataloader") is not None]
        raise ConfigError(
            f"The config has no {key}; splits it has: {', '.join(present) or 'none'}.")
    several = (isinstance(section, Mapping) and "dataset" not in section and len(section) > 0
               and all(isinstance(v, Mapping) and "dataset" in v for v in section.values()))
    if not several:
        if set_name is not None:
            raise ConfigError(f"--set {set_name}: {key} is a single data loader, not named sets.")
        return section, key
    names = list(section)
    name = names[0] if set_name is None else set_name
    if name not in section:
        raise ConfigError(f"--set {set_name}: {key} has the sets {', '.join(names)}."
                          f"{did_you_mean(str(set_name), names)}")
    return section[name], f"{key}.{name}"


def sample_items(loader: Any, n: int) -> list[tuple[Any, Any]]:
    """The first ``n`` sampler keys of epoch 0 and the dataset's items for them."""
    sampler = getattr(loader, "sampler", None)
    if sampler is None:
        raise DataError("The data loader has no sampler to draw keys from.")
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(0)
    keys = list(itertools.islice(iter(sampler), n))
    if not keys:
        raise DataError(f"The sampler of {type(loader.dataset).__name__} yields no sample.")
    return [(key, loader.dataset[key]) for key in keys]


def key_index(key: Any) -> int:
    """The dataset index of a sampler key (an int or a SampleKey)."""
    return int(key[0]) if isinstance(key, tuple) else int(key)


def metainfo(dataset: Any) -> dict:
    meta = getattr(dataset, "metainfo", None)  # a SeededDataset passes it through
    return dict(meta) if isinstance(meta, Mapping) else {}


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


# --------------------------------------------------------------------------------- images
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


# ----------------------------------------------------------------------------------- text
def find_tokenizer(dataset: Any) -> Any:
    """The tokenizer a text dataset reads with (see the module docstring)."""
    inner, meta = dataset, metainfo(dataset)
    for _ in range(8):  # through wrappers (SeededDataset.dataset ...)
        tokenizer = getattr(inner, "tokenizer", None)
        if tokenizer is not None and hasattr(tokenizer, "decode"):
            return tokenizer
        tokenizer = getattr(getattr(inner, "corpus", None), "tokenizer", None)
        if tokenizer is not None:
            return tokenizer
        inner = getattr(inner, "dataset", None)
        if inner is None:
            break
    source = meta.get("tokenizer")
    if isinstance(source, str) and os.path.exists(source):
        from libai.data.text import TextTokenizer

        return TextTokenizer.load(source)
    raise DataError(
        f"{type(dataset).__name__} has 'input_ids' but no tokenizer to decode them: give it a "
        f"'tokenizer' attribute (or a corpus with one), or metainfo['tokenizer'] = a file."
    )


def _ints(value: Any) -> list[int]:
    return [int(v) for v in torch.as_tensor(value).reshape(-1).tolist()]


def render_tokens(tokenizer: Any, ids: Sequence[int], marks: Mapping[int, int]) -> list[tuple]:
    """Pieces of decoded text: ``("text", s)``, ``("special", token)`` and, for a predicted
    position, ``("mark", shown token, original token)``. Runs of ordinary tokens are decoded
    together with the tokenizer, so word pieces join as the tokenizer joins them."""
    special = set(_ints(getattr(tokenizer, "special_ids", [])))
    pieces: list[tuple] = []
    run: list[int] = []

    def flush() -> None:
        if run:
            pieces.append(("text", tokenizer.decode(run, skip_special_tokens=False)))
            run.clear()

    def token(i: int) -> str:
        if getattr(tokenizer, "kind", None) == "wordpiece":  # '##ing' shows a word piece
            text = tokenizer.id_to_token(i)
        else:
            text = tokenizer.decode([i], skip_special_tokens=False)
        return text if text is not None else f"<{i}>"

    for pos, i in enumerate(ids):
        if pos in marks:
            flush()
            pieces.append(("mark", token(i), token(marks[pos])))
        elif i in special:
            flush()
            pieces.append(("special", token(i)))
        else:
            run.append(i)
    flush()
    return pieces


def pieces_html(pieces: Sequence[tuple], sep: str) -> str:
    out = []
    for piece in pieces:
        if piece[0] == "text":
            out.append(html.escape(piece[1]))
        elif piece[0] == "special":
            out.append(f'<span class="special">{html.escape(piece[1])}</span>')
        else:
            out.append(f"<mark>{html.escape(piece[1])}→{html.escape(piece[2])}</mark>")
    return sep.join(out)


def pieces_text(pieces: Sequence[tuple], sep: str) -> str:
    """Plain text: a predicted position as ``[MASK→original]`` or ``[token→original]``."""
    out = []
    for piece in pieces:
        if piece[0] == "mark":
            shown = piece[1][1:-1] if piece[1].startswith("[") and piece[1].endswith("]") else (
                piece[1])
            out.append(f"[{shown}→{piece[2]}]")
        else:
            out.append(piece[1])
    return sep.join(out)


def text_rows(dataset: Any, samples: Sequence[tuple[Any, Mapping]], tokenizer: Any) -> dict:
    """The table of text samples: ``{"columns": [...], "rows": [{column: (html, plain)}]}``."""
    sep = " " if getattr(tokenizer, "kind", "wordpiece") == "wordpiece" else ""
    next_sentence = getattr(dataset, "next_sentence", "nsp")
    ns_names = {"nsp": ("real next", "random"), "sop": ("in order", "swapped")}.get(
        next_sentence, ("0", "1"))
    rows = []
    for key, item in samples:
        ids = _ints(item["input_ids"])
        row: dict[str, tuple[str, str]] = {"sample": (str(key_index(key)),) * 2}
        if "attention_mask" in item:
            ids = ids[: sum(_ints(item["attention_mask"]))]
        if "mlm_positions" in item and "mlm_labels" in item:  # BERT
            pairs = zip(_ints(item["mlm_positions"]), _ints(item["mlm_labels"]))
            marks = {pos: lab for pos, lab in pairs if lab != _IGNORE}
            pieces = render_tokens(tokenizer, ids, marks)
            row["text"] = (pieces_html(pieces, sep), pieces_text(pieces, sep))
            row["predicted"] = (str(len(marks)),) * 2
            if "next_sentence_label" in item:
                label = int(torch.as_tensor(item["next_sentence_label"]))
                row["next sentence"] = (f"{label} ({ns_names[label]})",) * 2
        elif "labels" in item:  # GPT: the input and its next tokens
            labels = _ints(item["labels"])
            valid = [pos for pos, lab in enumerate(labels) if lab != _IGNORE]
            n = valid[-1] + 1 if valid else 0
            given = render_tokens(tokenizer, ids[:n], {})
            target = render_tokens(tokenizer, [labels[p] for p in valid], {})
            row["input"] = (pieces_html(given, sep), pieces_text(given, sep))
            row["labels (input shifted by one)"] = (pieces_html(target, sep),
                                                     pieces_text(target, sep))
        else:
            pieces = render_tokens(tokenizer, ids, {})
            row["text"] = (pieces_html(pieces, sep), pieces_text(pieces, sep))
        rows.append(row)
    columns = list(dict.fromkeys(c for row in rows for c in row))
    return {"columns": columns, "rows": rows}


_CSS = """body { font-family: sans-serif; margin: 1.5em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; text-align: left; }
td.text { font-family: monospace; max-width: 60em; }
mark { background: #ffe27a; }
.special { color: #888; }"""


def write_html(table: Mapping, path: str | os.PathLike, title: str) -> Path:
    """One HTML page: a ``<tr class="sample">`` per sample."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["#", *table["columns"]])
    body = []
    for i, row in enumerate(table["rows"]):
        cells = [f"<td>{i + 1}</td>"]
        for c in table["columns"]:
            cls = "" if c in ("sample", "predicted", "next sentence") else ' class="text"'
            cells.append(f"<td{cls}>{row.get(c, ('', ''))[0]}</td>")
        body.append(f'<tr class="sample">{"".join(cells)}</tr>')
    legend = ("<p><mark>shown→original</mark>: a position the model predicts (BERT: 80 % become "
              "[MASK], 10 % a random token, 10 % stay as they are).</p>\n"
              if "predicted" in table["columns"] else "")
    page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
            f"</title>\n<style>\n{_CSS}\n</style></head>\n<body>\n<h1>{html.escape(title)}</h1>\n"
            f"{legend}<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n" + "\n".join(body)
            + "\n</tbody>\n</table>\n</body></html>\n")
    path = Path(path)
    path.write_text(page, encoding="utf-8")
    return path


def print_table(table: Mapping, title: str, width: int = 160) -> None:
    """The plain-text version on the console (rich), each text cut to ``width`` characters."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Table(title=title, show_lines=True)
    for c in ["#", *table["columns"]]:
        out.add_column(c, overflow="fold")
    for i, row in enumerate(table["rows"]):
        cells = []
        for c in table["columns"]:
            plain = row.get(c, ("", ""))[1]
            cells.append(Text(plain if len(plain) <= width else plain[: width - 1] + "…"))
        out.add_row(str(i + 1), *cells)
    Console().print(out)


# ----------------------------------------------------------------------------------- tool
def sample_split(cfg: Any, split: str = "train", n: int = 16, set_name: str | None = None,
                 seed: int | None = None) -> tuple[Any, list[tuple[Any, Any]], str]:
    """Build ``split``'s data loader as the runner does and sample ``n`` items of it.

    Args:
        cfg: The config (see :func:`load_config`).
        split: "train", "val" or "test". Defaults to "train".
        n: Items to sample (fewer when the split is smaller). Defaults to 16.
        set_name: Which of several named sets of the split. Defaults to None: the first.
        seed: Seed of the sampler and the global RNGs. Defaults to None: the config's
            ``randomness.seed``, else 0.

    Returns:
        ``(dataset, [(sampler key, item), ...], config key of the loader)``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"-n must be a positive int, got {n!r}.")
    section, key = loader_section(cfg, split, set_name)
    if seed is None:
        seed = (cfg.get("randomness") or {}).get("seed")
        seed = 0 if seed is None else int(seed)
    seed_everything(dict(seed=seed))  # the global RNGs that random transforms draw from
    loader = build_loader(section, key, seed, DataParallel(), diff_rank_seed=False)
    return loader.dataset, sample_items(loader, n), key


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
