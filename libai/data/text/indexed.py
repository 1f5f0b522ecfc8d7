"""The indexed token format: a flat token file and an index of sentence and document offsets.

A corpus of documents, each a list of sentences, each a list of token ids, is stored as two
files (the layout of Megatron-LM's indexed datasets, with a checked header):

``<prefix>.bin``
    Every token of every sentence, back to back, as one numpy array of the smallest unsigned
    integer type that holds the vocabulary (uint16 up to 65,536 ids).
``<prefix>.idx``
    A fixed header (magic, version, item size, vocabulary size, counts, the size and a
    fingerprint of the ``.bin``), then ``sentence_offsets`` (int64, ``num_sentences + 1``: where
    each sentence starts in the token array) and ``doc_offsets`` (int64, ``num_docs + 1``:
    where each document starts in the sentence array).

Both are read with ``numpy.memmap``: opening a corpus costs the same whatever its size, memory
holds only the pages being read, and any document or sentence is two offset reads away. A
truncated file or an index paired with the wrong token file fails when opened, with a message
naming both files.

Writing is streaming (:class:`IndexedTokenWriter`): tokens go straight to disk and the offsets
to temporary files, so memory stays bounded whatever the corpus size. The ``.idx`` is written
last and renamed into place, so a crashed write leaves no index that looks complete.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from libai.utils.errors import DataError

__all__ = ["IndexedTokenDataset", "IndexedTokenWriter", "token_dtype", "index_paths"]

_MAGIC = b"LIBAITOK"
_VERSION = 1
# magic, version, itemsize, vocab_size, num_tokens, num_sentences, num_docs, bin_size,
# fingerprint (16 bytes)
_HEADER = struct.Struct("<8sIIQQQQQ16s")
_FINGERPRINT_SPAN = 1 << 20  # bytes hashed at each end of the .bin


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds ids ``0 .. vocab_size - 1``."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


def index_paths(prefix: str | os.PathLike) -> tuple[Path, Path]:
    """``(<prefix>.bin, <prefix>.idx)``."""
    prefix = str(prefix)
    return Path(prefix + ".bin"), Path(prefix + ".idx")


def _fingerprint(path: Path, size: int) -> bytes:
    """A hash of the size and the first and last MiB of a file: O(1) whatever the size."""
    h = hashlib.blake2b(digest_size=16)
    h.update(size.to_bytes(8, "little"))
    with open(path, "rb") as f:
        h.update(f.read(_FINGERPRINT_SPAN))
        if size > _FINGERPRINT_SPAN:
            f.seek(max(_FINGERPRINT_SPAN, size - _FINGERPRINT_SPAN))
            h.update(f.read(_FINGERPRINT_SPAN))
    return h.digest()


class IndexedTokenWriter:
    """Write a corpus to ``<prefix>.bin`` / ``<prefix>.idx``, one document at a time.

    Use as a context manager: the files appear only when the block ends without an error;
    on an error the temporary files are removed and an existing corpus at ``prefix`` is left
    as it was.

    Example::

        with IndexedTokenWriter("data/corpus", vocab_size=tokenizer.vocab_size) as w:
            for doc in documents:
                w.add_document([tokenizer.encode(s) for s in doc])

    Args:
        prefix: Output path without the ``.bin`` / ``.idx`` ending; its folder is created.
        vocab_size: Ids must be below it; chooses the token type (:func:`token_dtype`).

    Attributes:
        num_tokens, num_sentences, num_docs: Counts written so far.
        skipped_docs: Documents that had no token at all (not written).
    """

    def __init__(self, prefix: str | os.PathLike, vocab_size: int) -> None:
        self.bin_path, self.idx_path = index_paths(prefix)
        self.bin_path.parent.mkdir(parents=True, exist_ok=True)
        self.vocab_size = int(vocab_size)
        self.dtype = token_dtype(self.vocab_size)
        tag = f".tmp-{os.getpid()}"
        self._tmp_bin = self.bin_path.with_name(self.bin_path.name + tag)
        self._tmp_sent = self.bin_path.with_name(self.bin_path.name + tag + ".sentences")
        self._tmp_docs = self.bin_path.with_name(self.bin_path.name + tag + ".docs")
        self._bin = open(self._tmp_bin, "wb")
        self._sent = open(self._tmp_sent, "wb")  # int64 length of each sentence
        self._docs = open(self._tmp_docs, "wb")  # int64 number of sentences of each document
        self.num_tokens = self.num_sentences = self.num_docs = self.skipped_docs = 0
        self._closed = False

    def add_document(self, sentences: Sequence[Sequence[int] | np.ndarray]) -> None:
        """Append one document; empty sentences are dropped, an empty document is skipped.

        Raises:
            DataError: an id outside ``[0, vocab_size)``.
        """
        arrays = [np.asarray(s, dtype=np.int64) for s in sentences if len(s)]
        if not arrays:
            self.skipped_docs += 1
            return
        flat = np.concatenate(arrays)
        if flat.min() < 0 or flat.max() >= self.vocab_size:
            bad = int(flat.max() if flat.max() >= self.vocab_size else flat.min())
            raise DataError(
                f"Token id {bad} is outside the vocabulary [0, {self.vocab_size}) of "
                f"{self.bin_path}: the tokenizer and vocab_size disagree."
            )
        self._bin.write(flat.astype(self.dtype).tobytes())
        self._sent.write(np.fromiter((len(a) for a in arrays), np.int64, len(arrays)).tobytes())
        self._docs.write(np.int64(len(arrays)).tobytes())
        self.num_tokens += len(flat)
        self.num_sentences += len(arrays)
        self.num_docs += 1

    def finalize(self) -> None:
        """Write the index and move both files into place (the ``.idx`` last)."""
        if self.num_docs == 0:
            self.abort()
            raise DataError(
                f"The corpus for {self.bin_path.with_suffix('')} has no text: every document "
                f"was empty (check the input files and their format)."
            )
        for f in (self._bin, self._sent, self._docs):
            f.flush()
            os.fsync(f.fileno())
            f.close()
        bin_size = self._tmp_bin.stat().st_size
        header = _HEADER.pack(
            _MAGIC, _VERSION, self.dtype.itemsize, self.vocab_size, self.num_tokens,
            self.num_sentences, self.num_docs, bin_size, _fingerprint(self._tmp_bin, bin_size),
        )
        tmp_idx = self.idx_path.with_name(self.idx_path.name + f".tmp-{os.getpid()}")
        with open(tmp_idx, "wb") as out:
            out.write(header)
            _write_cumsum(self._tmp_sent, out)
            _write_cumsum(self._tmp_docs, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(self._tmp_bin, self.bin_path)
        os.replace(tmp_idx, self.idx_path)
        for p in (self._tmp_sent, self._tmp_docs):
            p.unlink(missing_ok=True)
        self._closed = True

    def abort(self) -> None:
        """Close and remove the temporary files; nothing at ``prefix`` changes."""
        for f in (self._bin, self._sent, self._docs):
            f.close()
        for p in (self._tmp_bin, self._tmp_sent, self._tmp_docs):
            p.unlink(missing_ok=True)
        self._closed = True

    def __enter__(self) -> IndexedTokenWriter:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._closed:
            return
        if exc_type is None:
            self.finalize()
        else:
            self.abort()


def _write_cumsum(lengths_path: Path, out: Any, chunk: int = 1 << 20) -> None:
    """Write ``[0, cumsum(lengths)...]`` as int64, reading the lengths in bounded chunks."""
    total = np.zeros(1, dtype=np.int64)
    out.write(total.tobytes())
    with open(lengths_path, "rb") as f:
        while True:
            block = np.frombuffer(f.read(chunk * 8), dtype=np.int64)
            if not len(block):
                break
            offsets = np.cumsum(block) + total[0]
            out.write(offsets.tobytes())
            total[0] = offsets[-1]


class IndexedTokenDataset:
    """Read a corpus written by :class:`IndexedTokenWriter`; item ``i`` is document ``i``.

    Args:
        prefix: Path without the ``.bin`` / ``.idx`` ending.

    Attributes:
        num_tokens, num_sentences, num_docs, vocab_size: From the header.
        tokens: The ``(num_tokens,)`` token memmap.
        sentence_offsets: ``(num_sentences + 1,)`` int64: sentence ``j`` is
            ``tokens[sentence_offsets[j]:sentence_offsets[j + 1]]``.
        doc_offsets: ``(num_docs + 1,)`` int64: document ``i`` is sentences
            ``doc_offsets[i] .. doc_offsets[i + 1] - 1``.

    Raises:
        DataError: a missing file, a file that is not an index, a truncated file, or a token
            file that does not belong to the index.
    """

    def __init__(self, prefix: str | os.PathLike) -> None:
        self.prefix = str(prefix)
        self.bin_path, self.idx_path = index_paths(prefix)
        self._open()

    def _open(self) -> None:
        bin_path, idx_path = self.bin_path, self.idx_path
        for p in (idx_path, bin_path):
            if not p.is_file():
                raise DataError(
                    f"Indexed corpus file {p} not found. Write it with tools/preprocess_text.py "
                    f"(it makes {bin_path.name} and {idx_path.name} together)."
                )
        idx_size = idx_path.stat().st_size
        with open(idx_path, "rb") as f:
            raw = f.read(_HEADER.size)
        if len(raw) < _HEADER.size or raw[:8] != _MAGIC:
            raise DataError(f"{idx_path} is not a libai token index (wrong or missing header).")
        (_, version, itemsize, vocab, n_tok, n_sent, n_doc, bin_size, fingerprint) = (
            _HEADER.unpack(raw)
        )
        if version != _VERSION:
            raise DataError(f"{idx_path}: index version {version}, this libai reads {_VERSION}.")
        expected = _HEADER.size + 8 * (n_sent + 1 + n_doc + 1)
        if idx_size != expected:
            raise DataError(
                f"{idx_path} is truncated or damaged: {idx_size} bytes, its header says "
                f"{expected}. Write the corpus again with tools/preprocess_text.py."
            )
        actual = bin_path.stat().st_size
        if actual != bin_size or n_tok * itemsize != bin_size:
            raise DataError(
                f"{bin_path} has {actual} bytes but its index {idx_path.name} expects {bin_size} "
                f"({n_tok} tokens of {itemsize} bytes): the token file is truncated or belongs to "
                f"another index. Write both again with tools/preprocess_text.py."
            )
        if _fingerprint(bin_path, actual) != fingerprint:
            raise DataError(
                f"{bin_path} does not belong to {idx_path.name} (its content differs from the "
                f"file the index was written with). Keep each .bin with its own .idx."
            )
        self.vocab_size, self.num_tokens = int(vocab), int(n_tok)
        self.num_sentences, self.num_docs = int(n_sent), int(n_doc)
        self.dtype = token_dtype(self.vocab_size)
        self.tokens = np.memmap(bin_path, dtype=self.dtype, mode="r", shape=(self.num_tokens,))
        self.sentence_offsets = np.memmap(
            idx_path, dtype=np.int64, mode="r", offset=_HEADER.size, shape=(n_sent + 1,)
        )
        self.doc_offsets = np.memmap(
            idx_path, dtype=np.int64, mode="r", offset=_HEADER.size + 8 * (n_sent + 1),
            shape=(n_doc + 1,),
        )
        so, do = self.sentence_offsets, self.doc_offsets
        if so[0] != 0 or so[-1] != n_tok or do[0] != 0 or do[-1] != n_sent:
            raise DataError(f"{idx_path} is damaged: its offsets do not span the corpus.")

    # --------------------------------------------------------------------- access
    def __len__(self) -> int:
        return self.num_docs

    def __getitem__(self, i: int) -> np.ndarray:
        """All tokens of document ``i`` (a read-only view)."""
        start, end = self.doc_token_range(i)
        return self.tokens[start:end]

    def doc_sentence_range(self, i: int) -> tuple[int, int]:
        """``(first, end)`` sentence indices of document ``i`` (end exclusive)."""
        if not -self.num_docs <= i < self.num_docs:
            raise IndexError(f"document {i} out of range ({self.num_docs} documents)")
        i %= self.num_docs
        return int(self.doc_offsets[i]), int(self.doc_offsets[i + 1])

    def doc_token_range(self, i: int) -> tuple[int, int]:
        """``(start, end)`` token offsets of document ``i`` (end exclusive)."""
        first, end = self.doc_sentence_range(i)
        return int(self.sentence_offsets[first]), int(self.sentence_offsets[end])

    def sentence(self, j: int) -> np.ndarray:
        """Tokens of sentence ``j`` (a read-only view)."""
        return self.tokens[self.sentence_offsets[j] : self.sentence_offsets[j + 1]]

    def doc_lengths(self) -> np.ndarray:
        """``(num_docs,)`` int64 tokens per document."""
        return np.diff(self.sentence_offsets[np.asarray(self.doc_offsets)])

    def sentence_lengths(self) -> np.ndarray:
        """``(num_sentences,)`` int64 tokens per sentence."""
        return np.diff(np.asarray(self.sentence_offsets))

    # ----------------------------------------------------------- worker processes
    def __getstate__(self) -> dict[str, Any]:
        # a memmap would pickle as a full in-memory copy: send the path and reopen instead
        return {"prefix": self.prefix}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.prefix = state["prefix"]
        self.bin_path, self.idx_path = index_paths(self.prefix)
        self._open()

    def __repr__(self) -> str:
        return (
            f"IndexedTokenDataset({self.prefix!r}, docs={self.num_docs}, "
            f"sentences={self.num_sentences}, tokens={self.num_tokens}, dtype={self.dtype})"
        )
