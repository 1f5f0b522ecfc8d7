"""Raw text to the indexed token format: read documents, tokenise them in worker processes, write.

The input formats and their readers are in ``reading.py``.

:func:`preprocess_corpus` tokenises with a pool of processes and writes through
:class:`~libai.data.text.IndexedTokenWriter`, in input order. Only a few chunks of text are in
flight at any time, so memory stays bounded whatever the corpus size (``Pool.imap`` would not do:
its feeder thread reads the whole input ahead of the workers).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from libai.utils.errors import DataError

from .indexed import IndexedTokenWriter, index_paths
from .reading import Item, check_inputs, read_items
from .tokenizer import TextTokenizer, build_tokenizer

__all__ = ["preprocess_corpus", "preprocess_documents"]

_CHUNK_CHARS = 1 << 20  # text per worker task: large enough that pickling costs little
_TASKS_PER_WORKER = 2  # tasks in flight per worker: keeps each busy while one result is written
_AUTO_POOL_BYTES = 32 << 20  # below this, starting worker processes costs more than it saves

_Chunk = tuple[list[list[str]], int, int]  # a worker task: documents, progress units, empty docs
_Encoded = tuple[np.ndarray, np.ndarray, np.ndarray]  # see _encode_docs


# ------------------------------------------------------------------------------- tokenising
_worker_tokenizer: TextTokenizer | None = None


def _init_worker(tokenizer_file: str, kind: str, special_tokens: dict[str, str]) -> None:
    # one process per core already: the library's own threads would only compete
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer

    global _worker_tokenizer
    # the roles too: a Hugging Face tokenizer's config may name another end of document
    _worker_tokenizer = TextTokenizer(Tokenizer.from_file(tokenizer_file), kind,
                                      special_tokens=special_tokens)


def _encode_in_worker(docs: list[list[str]], append_eod: bool) -> _Encoded:
    assert _worker_tokenizer is not None, "worker started without _init_worker"
    return _encode_docs(_worker_tokenizer, docs, append_eod)


def _encode_docs(tokenizer: TextTokenizer, docs: list[list[str]], append_eod: bool) -> _Encoded:
    """Token ids of ``docs`` as three flat arrays (pickled cheaply back from a worker):
    ``(tokens, tokens per sentence, sentences per document)``; empty sentences are dropped."""
    ids = tokenizer.encode_batch([s for doc in docs for s in doc])
    tokens: list[int] = []
    sentence_lengths: list[int] = []
    doc_sentences: list[int] = []
    pos = 0
    for doc in docs:
        sentences = [s for s in ids[pos : pos + len(doc)] if s]
        pos += len(doc)
        if sentences and append_eod:  # GPT-2's document separator, as Megatron's --append-eod
            sentences[-1] = [*sentences[-1], tokenizer.eod_id]
        for s in sentences:
            tokens += s
            sentence_lengths.append(len(s))
        doc_sentences.append(len(sentences))
    return (
        np.array(tokens, dtype=np.int32),
        np.array(sentence_lengths, dtype=np.int64),
        np.array(doc_sentences, dtype=np.int64),
    )


def _chunks(items: Iterable[Item]) -> Iterator[_Chunk]:
    """Group documents into worker tasks: ``(documents, progress units, empty documents)``."""
    docs: list[list[str]] = []
    units = empty = chars = 0
    for doc, n in items:
        units += n
        if doc is not None:
            if doc:
                docs.append(doc)
                chars += sum(len(s) for s in doc)
            else:
                empty += 1
        if chars >= _CHUNK_CHARS:
            yield docs, units, empty
            docs, units, empty, chars = [], 0, 0, 0
    if docs or units or empty:
        yield docs, units, empty


def _encoded_chunks(
    chunks: Iterable[_Chunk], tokenizer: TextTokenizer, workers: int, append_eod: bool
) -> Iterator[tuple[_Encoded, int, int]]:
    """Encode chunks in input order, in-process (``workers <= 1``) or in a pool."""
    if workers <= 1:
        for docs, units, empty in chunks:
            yield _encode_docs(tokenizer, docs, append_eod), units, empty
        return
    # spawn, not fork: a forked child of a process whose tokenizer threads ran can deadlock.
    # An executor, not multiprocessing.Pool: a worker that dies breaks it (an error) where a
    # Pool would start replacements forever.
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="libai-preprocess-") as tmp:
        # Workers load the tokenizer from a file. Passed as an argument, its megabytes would go
        # down the pipe that starts each worker, and CPython blocks on that pipe forever when
        # the worker dies while starting (e.g. it cannot re-import the main script).
        init = (str(Path(tmp) / "tokenizer.json"), tokenizer.kind, tokenizer.special_tokens)
        tokenizer.backend.save(init[0])
        pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=init)
        pending: deque[tuple[Future, int, int]] = deque()
        try:
            for docs, units, empty in chunks:
                pending.append((pool.submit(_encode_in_worker, docs, append_eod), units, empty))
                if len(pending) >= workers * _TASKS_PER_WORKER:  # bounded: wait for the oldest
                    future, u, e = pending.popleft()
                    yield future.result(), u, e
            while pending:
                future, u, e = pending.popleft()
                yield future.result(), u, e
        except BrokenProcessPool as e:
            raise DataError(
                "A tokenising worker process died: killed, out of memory, or unable to re-import "
                "the main script (spawned workers do: run code from a file, under `if __name__ "
                "== '__main__':`). workers=0 tokenises in this process."
            ) from e
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _write_encoded(writer: IndexedTokenWriter, encoded: _Encoded) -> None:
    tokens, sentence_lengths, doc_sentences = encoded
    ends = np.cumsum(sentence_lengths)
    starts = ends - sentence_lengths
    first = 0
    for n in doc_sentences.tolist():
        writer.add_document([tokens[starts[j] : ends[j]] for j in range(first, first + n)])
        first += n


# ---------------------------------------------------------------------------------- writing
def preprocess_corpus(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    output_prefix: str | os.PathLike,
    tokenizer: TextTokenizer | str | os.PathLike,
    fmt: str = "auto",
    json_key: str = "text",
    workers: int | None = None,
    append_eod: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Tokenise text or JSON-lines files into ``<output_prefix>.bin`` / ``.idx``.

    The tokenizer is saved beside them as ``<output_prefix>.tokenizer.json`` (and, for
    WordPiece, ``<output_prefix>.vocab.txt``), so the corpus can be opened with its own
    vocabulary later (:func:`~libai.data.text.load_corpus`). Files appear only when all went
    well; a failed run leaves an existing corpus at ``output_prefix`` as it was.

    Args:
        paths: The input files, read in order (see :func:`read_documents`).
        output_prefix: Output path without endings; its folder is created.
        tokenizer: A :class:`TextTokenizer`, or a tokenizer file to load.
        fmt: "auto", "text" or "jsonl". Defaults to "auto".
        json_key: The key holding the text in JSON lines. Defaults to "text".
        workers: Tokenising processes; 0 or 1 tokenises in this process. Defaults to None: in
            this process below 32 MiB of input, else one per CPU core up to 8.
        append_eod: End every document with the tokenizer's ``eod_id``, as the last token of
            its last sentence (GPT-style document separator). Defaults to False.
        progress: Show a progress bar (bytes read) when the console is a terminal. Defaults
            to True.

    Returns:
        Counts: ``docs``, ``sentences``, ``tokens``, ``skipped_docs`` (documents without a
        token), ``seconds``, ``workers``, ``dtype`` (of the token file) and ``files`` (written).

    Raises:
        DataError: an unreadable input (see :func:`read_documents`), or no text at all.
    """
    files = check_inputs(paths, fmt)
    total = sum(p.stat().st_size for p in files)
    if workers is None:
        workers = 1 if total < _AUTO_POOL_BYTES else min(os.cpu_count() or 1, 8)
    described = f"{files[0]}" + (f" and {len(files) - 1} more files" if len(files) > 1 else "")
    items, bar = read_items(files, fmt, json_key), (progress, total, "bytes")
    return _preprocess(items, output_prefix, tokenizer, workers, append_eod, bar, described)


def preprocess_documents(
    documents: Iterable[Sequence[str]],
    output_prefix: str | os.PathLike,
    tokenizer: TextTokenizer | str | os.PathLike,
    workers: int = 1,
    append_eod: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """:func:`preprocess_corpus` for documents already in memory or generated (lists of
    sentences); the progress bar counts documents. ``workers`` defaults to 1 (in-process)."""
    total = len(documents) if hasattr(documents, "__len__") else None
    items, bar = ((list(doc), 1) for doc in documents), (progress, total, "documents")
    return _preprocess(items, output_prefix, tokenizer, workers, append_eod, bar, "the documents")


def _preprocess(
    items: Iterable[Item],
    output_prefix: str | os.PathLike,
    tokenizer: TextTokenizer | str | os.PathLike,
    workers: int,
    append_eod: bool,
    bar: tuple[bool, int | None, str],
    described: str,
) -> dict[str, Any]:
    """The shared body of the preprocess functions; ``bar`` is ``(enabled, total, unit)``."""
    start = time.perf_counter()
    tok = build_tokenizer(tokenizer)
    prefix = Path(output_prefix)
    empty = 0
    with _progress_bar(*bar) as advance, IndexedTokenWriter(prefix, tok.vocab_size) as writer:
        for encoded, units, n_empty in _encoded_chunks(_chunks(items), tok, workers, append_eod):
            _write_encoded(writer, encoded)
            empty += n_empty
            advance(units)
        if writer.num_docs == 0:  # raised inside the block: the writer removes its files
            raise DataError(
                f"No text in {described}: every document was empty. Text files hold one "
                f"sentence per line, blank lines between documents; JSON lines hold one object "
                f"per line with the text under json_key."
            )
    files = [*index_paths(prefix), *_save_tokenizer(tok, prefix)]
    return {
        "docs": writer.num_docs,
        "sentences": writer.num_sentences,
        "tokens": writer.num_tokens,
        "skipped_docs": writer.skipped_docs + empty,
        "seconds": time.perf_counter() - start,
        "workers": max(workers, 1),
        "dtype": writer.dtype.name,
        "files": [str(f) for f in files],
    }


def _save_tokenizer(tokenizer: TextTokenizer, prefix: Path) -> list[Path]:
    """Write ``<prefix>.tokenizer.json`` (+ ``.vocab.txt``) via a temporary folder, so that a
    reader never finds a half-written tokenizer beside the corpus."""
    tmp = prefix.with_name(f"{prefix.name}.tmp-{os.getpid()}-tokenizer")
    try:
        tokenizer.save(tmp / "corpus.tokenizer.json")
        written = []
        for f in sorted(tmp.iterdir()):  # corpus.tokenizer.json, corpus.vocab.txt
            target = prefix.with_name(prefix.name + f.name.removeprefix("corpus"))
            os.replace(f, target)
            written.append(target)
        return written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _progress_bar(enabled: bool, total: int | None, unit: str) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``: a rich progress bar on the shared console when ``enabled`` and
    the console is a terminal, else a function that does nothing."""
    from libai.utils.logging import get_console, stdout_is_terminal

    if not (enabled and stdout_is_terminal()):
        yield lambda n: None
        return
    from rich import progress as rp

    count = rp.DownloadColumn() if unit == "bytes" else rp.MofNCompleteColumn()
    columns = [rp.TextColumn("[bold]tokenising"), rp.BarColumn(), count]
    columns += [rp.TimeElapsedColumn(), rp.TimeRemainingColumn()]
    with rp.Progress(*columns, console=get_console()) as bar:
        task = bar.add_task("tokenising", total=total)
        yield lambda n: bar.advance(task, n)
