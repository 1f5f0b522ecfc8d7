"""Reading corpora: text and JSON-lines files as a stream of documents (lists of sentences).

Two input formats:

- ``"text"``: the BERT pre-training format. One sentence per line; a blank line ends a document.
- ``"jsonl"``: JSON lines. One document per line, its text under a key (``"text"``), split into
  sentences at its newlines.

``"auto"`` picks ``jsonl`` for files ending in ``.jsonl``, ``.json`` or ``.ndjson``, else
``text``. Files are read as UTF-8 (a leading byte-order mark is ignored). Empty lines and
sentences are dropped. Errors name the file and the line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import did_you_mean, unknown

__all__ = [
    "INPUT_FORMATS", "Item", "check_inputs", "file_format", "read_documents", "read_items",
]

INPUT_FORMATS = ("auto", "text", "jsonl")
_JSONL_SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}

# A document as the readers yield it: (sentences, progress units, here bytes). Sentences of None
# is progress only (blank lines at the end of a file); [] is a document without text.
Item = tuple[list[str] | None, int]


def read_documents(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    fmt: str = "auto",
    json_key: str = "text",
) -> Iterator[list[str]]:
    """Stream the documents of text or JSON-lines files, each a list of sentences.

    Args:
        paths: One file or several, read in order; a document never spans two files.
        fmt: "auto", "text" or "jsonl" (see the module docstring). Defaults to "auto".
        json_key: The key holding the text in JSON lines. Defaults to "text".

    Returns:
        An iterator over the documents with at least one sentence (empty ones are left out).

    Raises:
        DataError: a missing file, text that is not UTF-8, a bad JSON line or a missing key,
            naming the file and line.
    """
    files = check_inputs(paths, fmt)  # now, not at the first next()
    return (doc for doc, _ in read_items(files, fmt, json_key) if doc)


def check_inputs(paths: str | os.PathLike | Sequence[str | os.PathLike], fmt: str) -> list[Path]:
    """The input files as paths, each checked to exist, and the format checked."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not items:
        raise DataError("No input files given: pass one or more text or JSON-lines files.")
    out = [Path(p) for p in items]
    for p in out:
        if p.is_dir():
            raise DataError(f"Input {p} is a folder: pass its files (e.g. {p}/*.txt).")
        if not p.is_file():
            raise DataError(f"Input file {p} not found.")
        _file_format(p, fmt)
    return out


def _file_format(path: Path, fmt: str) -> str:
    return file_format(path, fmt, INPUT_FORMATS, _JSONL_SUFFIXES, default="text", what="input format")


def file_format(path: Path, fmt: str, formats: Sequence[str], suffixes: Mapping[str, str],
                default: str | None = None, what: str = "format") -> str:
    """The format to read ``path`` in: ``fmt``, or for ``fmt="auto"`` the one its suffix names.

    Args:
        path: The file.
        fmt: "auto" or one of ``formats``.
        formats: The formats the reader knows, "auto" first.
        suffixes: ``{suffix: format}`` for "auto" (lower-case suffixes with the dot).
        default: The format of a file whose suffix is not in ``suffixes``. Defaults to None:
            such a file is an error.
        what: What ``fmt`` is, for the message. Defaults to "format".

    Raises:
        ConfigError: ``fmt`` is not one of ``formats``.
        DataError: ``fmt`` is "auto", the suffix is unknown and there is no ``default``.
    """
    if fmt not in formats:
        raise ConfigError(unknown(f"Unknown {what} {fmt!r}", fmt, formats, "Choose from"))
    if fmt != "auto":
        return fmt
    kind = suffixes.get(path.suffix.lower(), default)
    if kind is None:
        first: dict[str, str] = {}
        for suffix, known in suffixes.items():
            first.setdefault(known, suffix)
        named = [first[f] for f in formats if f in first]  # one suffix a format
        raise DataError(f"Cannot tell the format of {path} from its suffix: name it "
                        f"{', '.join(named[:-1])} or {named[-1]}, or set fmt="
                        f"{' | '.join(repr(f) for f in formats if f != 'auto')}.")
    return kind


def read_items(paths: list[Path], fmt: str, json_key: str) -> Iterator[Item]:
    """Documents of every file with the bytes each consumed (the progress bar's unit)."""
    for path in paths:
        if _file_format(path, fmt) == "jsonl":
            yield from _jsonl_items(path, json_key)
        else:
            yield from _text_items(path)


def _lines(path: Path) -> Iterator[tuple[int, str, int]]:
    """``(line number, text, bytes)`` of each line; decoded line by line to name a bad one."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{path}, line {n}: not UTF-8 ({e.reason} at byte {e.start} of the line). "
                    f"Convert the file to UTF-8, e.g. iconv -f LATIN1 -t UTF-8."
                ) from e
            yield n, text.removeprefix("\ufeff") if n == 1 else text, len(raw)


def _text_items(path: Path) -> Iterator[Item]:
    doc: list[str] = []
    size = 0
    for _, text, nbytes in _lines(path):
        size += nbytes
        line = text.strip()
        if line:
            doc.append(line)
        elif doc:
            yield doc, size
            doc, size = [], 0
    yield (doc or None), size


def _jsonl_items(path: Path, json_key: str) -> Iterator[Item]:
    for n, text, nbytes in _lines(path):
        if not text.strip():
            yield None, nbytes
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{path}, line {n}: not valid JSON ({e.msg}, column {e.colno}). Each line of a "
                f'JSON-lines file must be one object, e.g. {{"{json_key}": "..."}}.'
            ) from e
        if not isinstance(record, dict):
            raise DataError(
                f"{path}, line {n}: a JSON {type(record).__name__}, expected an object with the "
                f"text under {json_key!r}."
            )
        if json_key not in record:
            keys = ", ".join(repr(k) for k in list(record)[:10]) or "none"
            raise DataError(
                f"{path}, line {n}: no key {json_key!r} (keys: {keys}).{did_you_mean(json_key, record)} "
                f"Name the key that holds the text with json_key= (--json-key)."
            )
        value = record[json_key]
        if not isinstance(value, str):
            raise DataError(
                f"{path}, line {n}: {json_key!r} holds a {type(value).__name__}, expected a string."
            )
        yield [s for s in (line.strip() for line in value.splitlines()) if s], nbytes
