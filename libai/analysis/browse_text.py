"""Showing text items: the tokens decoded with the dataset's tokenizer, BERT's predicted positions
marked and GPT's labels beside the input, as an HTML table and a plain-text one on the console
(see :mod:`libai.analysis.browse`)."""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from libai.utils.errors import DataError

from .browse_sample import key_index, metainfo

__all__ = [
    "find_tokenizer",
    "pieces_html",
    "pieces_text",
    "print_table",
    "render_tokens",
    "text_rows",
    "write_html",
]

_IGNORE = -100  # label of a position that is not predicted


def find_tokenizer(dataset: Any) -> Any:
    """The tokenizer a text dataset reads with (see :mod:`libai.analysis.browse`)."""
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

