"""Tokenizers for the text datasets, on the ``tokenizers`` library (nothing hand-written).

Two kinds, as their references use them:

- ``"wordpiece"`` (BERT): BERT's normalizer (unicode clean-up, Chinese characters split,
  optional lower-casing and accent stripping), BERT's pre-tokenizer (whitespace and punctuation),
  WordPiece with ``##`` continuations; special tokens ``[PAD] [UNK] [CLS] [SEP] [MASK]`` get
  ids 0-4.
- ``"bpe"`` (GPT-2): byte-level BPE (every string encodes, nothing is unknown), special token
  ``<|endoftext|>`` (id 0) separates documents.

A tokenizer is trained offline from text in seconds (:meth:`TextTokenizer.train`), or loaded
from a ``tokenizer.json``, a BERT ``vocab.txt`` or a GPT-2 ``vocab.json`` + ``merges.txt``
(:meth:`TextTokenizer.load`). Training asks for an exact vocabulary size: when the corpus
yields fewer tokens, unused special tokens fill the rest (as BERT's own ``vocab.txt`` carries
``[unused*]`` entries), so the size in a config is the size the model gets.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import did_you_mean

__all__ = ["TextTokenizer", "build_tokenizer", "TOKENIZER_KINDS"]

TOKENIZER_KINDS = ("wordpiece", "bpe")
_WORDPIECE_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_BPE_EOD = "<|endoftext|>"
_INSTALL = "pip install tokenizers (or pip install 'libai[optional]')"


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as e:
        raise DataError(f"The text datasets need the 'tokenizers' library: {_INSTALL}.") from e
    return tokenizers


class TextTokenizer:
    """A trained ``tokenizers.Tokenizer`` with the ids the datasets need.

    Args:
        backend: The ``tokenizers.Tokenizer``.
        kind: "wordpiece" or "bpe". Defaults to None: read from the backend's model.
        source: Where it was loaded from, for messages. Defaults to None.

    Attributes:
        vocab_size: Number of ids, added (special) tokens included.
        pad_id, unk_id, cls_id, sep_id, mask_id: WordPiece special ids (None for BPE).
        eod_id: The id that ends a document: ``<|endoftext|>`` (BPE) or ``[SEP]`` (WordPiece).
    """

    def __init__(self, backend: Any, kind: str | None = None, source: str | None = None) -> None:
        self.backend = backend
        if kind is None:
            model_type = json.loads(backend.to_str())["model"]["type"]
            kind = {"WordPiece": "wordpiece", "BPE": "bpe"}.get(model_type)
            if kind is None:
                raise DataError(
                    f"Tokenizer {source or ''}: a {model_type} model; the text datasets take "
                    f"WordPiece (BERT) or BPE (GPT-2) tokenizers."
                )
        self.kind = kind
        self.source = source
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        tid = backend.token_to_id
        if kind == "wordpiece":
            self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
                tid(t) for t in _WORDPIECE_SPECIALS
            )
            missing = [t for t in _WORDPIECE_SPECIALS if tid(t) is None]
            if missing:
                raise DataError(
                    f"Tokenizer {source or ''} has no {', '.join(missing)}: a BERT vocabulary "
                    f"needs {' '.join(_WORDPIECE_SPECIALS)}."
                )
            self.eod_id = self.sep_id
        else:
            self.pad_id = self.unk_id = self.cls_id = self.sep_id = self.mask_id = None
            self.eod_id = tid(_BPE_EOD)
            if self.eod_id is None:
                raise DataError(f"Tokenizer {source or ''} has no {_BPE_EOD} token (GPT-2 BPE).")
        self._special_ids: np.ndarray | None = None
        self._word_starts: np.ndarray | None = None

    # ------------------------------------------------------------------- encoding
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without special tokens."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """:meth:`encode` for many texts at once (the backend may use several threads)."""
        return [e.ids for e in self.backend.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; WordPiece joins ``##`` pieces, byte-level BPE restores the bytes."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.backend.token_to_id(token)

    def id_to_token(self, index: int) -> str | None:
        return self.backend.id_to_token(int(index))

    @property
    def special_ids(self) -> np.ndarray:
        """Sorted ids of every special token (added tokens included), as int64."""
        if self._special_ids is None:
            added = self.backend.get_added_tokens_decoder()
            self._special_ids = np.array(
                sorted(i for i, tok in added.items() if tok.special), dtype=np.int64
            )
        return self._special_ids

    @property
    def word_starts(self) -> np.ndarray:
        """``(vocab_size,)`` bool: token ``i`` begins a word (whole-word masking groups the rest).

        WordPiece: every token not starting with ``##``. BPE: tokens starting with the
        byte-level space marker ``Ġ`` (and specials).
        """
        if self._word_starts is None:
            vocab = self.backend.get_vocab(with_added_tokens=True)
            starts = np.ones(self.vocab_size, dtype=bool)
            specials = set(self.special_ids.tolist())
            for token, i in vocab.items():
                if self.kind == "wordpiece":
                    starts[i] = not token.startswith("##")
                else:
                    starts[i] = token.startswith("\u0120") or i in specials
            self._word_starts = starts
        return self._word_starts

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike) -> Path:
        """Write ``tokenizer.json`` to ``path`` (a file name, or a folder to write it in).

        A WordPiece tokenizer also writes ``vocab.txt`` beside it (one token per line, in id
        order), the file BERT tools read.

        Returns:
            The path of the ``tokenizer.json`` written.
        """
        path = Path(path)
        if path.suffix != ".json":
            path.mkdir(parents=True, exist_ok=True)
            path = path / "tokenizer.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(path))
        if self.kind == "wordpiece":
            vocab = self.backend.get_vocab(with_added_tokens=True)
            lines = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
            vocab_path = path.with_name(path.name.replace("tokenizer.json", "vocab.txt"))
            if vocab_path == path:
                vocab_path = path.with_suffix(".vocab.txt")
            vocab_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, lowercase: bool = True) -> TextTokenizer:
        """Load a ``tokenizer.json``, a BERT ``vocab.txt``, or a folder holding one of them
        (or GPT-2's ``vocab.json`` + ``merges.txt``).

        Args:
            path: The file or folder.
            lowercase: For a ``vocab.txt``: lower-case input as uncased BERT models do.
                Defaults to True.

        Raises:
            DataError: nothing readable there (the message lists what was looked for).
        """
        tk = _tokenizers()
        p = Path(path)
        if p.is_dir():
            for name in ("tokenizer.json", "vocab.txt"):
                if (p / name).is_file():
                    return cls.load(p / name, lowercase=lowercase)
            if (p / "vocab.json").is_file() and (p / "merges.txt").is_file():
                from tokenizers.implementations import ByteLevelBPETokenizer

                bpe = ByteLevelBPETokenizer(str(p / "vocab.json"), str(p / "merges.txt"))
                return cls(bpe._tokenizer, "bpe", source=str(p))
            raise DataError(
                f"Tokenizer folder {p} holds no tokenizer.json, vocab.txt or vocab.json + "
                f"merges.txt."
            )
        if not p.is_file():
            raise DataError(
                f"Tokenizer file {p} not found. Give a tokenizer.json, a BERT vocab.txt, or a "
                f"folder holding one; or train one with tokenizer=dict(type='wordpiece', "
                f"vocab_size=...)."
            )
        try:
            if p.suffix == ".txt":
                from tokenizers.implementations import BertWordPieceTokenizer

                wp = BertWordPieceTokenizer(str(p), lowercase=lowercase)
                return cls(wp._tokenizer, "wordpiece", source=str(p))
            return cls(tk.Tokenizer.from_file(str(p)), source=str(p))
        except Exception as e:  # the Rust library raises plain Exception for a bad file
            if isinstance(e, DataError):
                raise
            raise DataError(f"Cannot read tokenizer {p}: {e}") from e

    # ------------------------------------------------------------------- training
    @classmethod
    def train(
        cls,
        texts: Iterable[str] | Callable[[], Iterable[str]],
        kind: str,
        vocab_size: int,
        lowercase: bool = True,
        min_frequency: int = 2,
        length: int | None = None,
    ) -> TextTokenizer:
        """Train a tokenizer on ``texts`` (an iterable of strings; read once, streaming).

        The result is deterministic for a given text (see :func:`_train_wordpiece` for how,
        since ``tokenizers``' own WordPiece training is not).

        Args:
            texts: The training text, e.g. one line per item: an iterable, or a callable that
                returns a fresh one. WordPiece reads it twice: a one-shot iterator is kept in
                memory for that, a callable or a list is not copied.
            kind: "wordpiece" (BERT) or "bpe" (GPT-2 byte-level BPE).
            vocab_size: The exact vocabulary size wanted, special tokens included. When the
                text yields fewer tokens, unused special tokens fill the rest.
            lowercase: Lower-case (and strip accents) before WordPiece. Ignored for BPE, which
                keeps every byte. Defaults to True.
            min_frequency: Merges must occur this often. Defaults to 2.
            length: Number of items in ``texts``, for the progress estimate. Defaults to None.

        Raises:
            ConfigError: an unknown kind or a vocabulary size below what the text needs.
        """
        tk = _tokenizers()
        kind = _check_kind(kind)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ConfigError(f"tokenizer vocab_size must be a positive int, got {vocab_size!r}.")
        if callable(texts):
            read = texts
        elif iter(texts) is texts:  # a one-shot iterator: WordPiece needs two passes
            kept = list(texts)
            read = lambda: kept  # noqa: E731
        else:
            read = lambda: texts  # noqa: E731
        if kind == "wordpiece":
            backend = _train_wordpiece(tk, read, vocab_size, lowercase, min_frequency, length)
        else:
            backend = tk.Tokenizer(tk.models.BPE())
            backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
            backend.decoder = tk.decoders.ByteLevel()
            trainer = tk.trainers.BpeTrainer(
                vocab_size=vocab_size,
                min_frequency=min_frequency,
                special_tokens=[_BPE_EOD],
                initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                show_progress=False,
            )
            backend.train_from_iterator(read(), trainer, length=length)
        got = backend.get_vocab_size(with_added_tokens=True)
        if got > vocab_size:
            raise ConfigError(
                f"tokenizer vocab_size={vocab_size} is too small: the text's alphabet and special "
                f"tokens alone need {got} ids. Ask for vocab_size >= {got}."
            )
        if got < vocab_size:  # fill with unused specials, as BERT's vocab.txt does
            fmt = "[unused{}]" if kind == "wordpiece" else "<|unused_{}|>"
            backend.add_special_tokens([fmt.format(i) for i in range(vocab_size - got)])
        return cls(backend, kind, source=f"trained {kind} ({vocab_size} tokens)")

    def __repr__(self) -> str:
        return f"TextTokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, source={self.source!r})"


def _wordpiece_backend(tk: Any, vocab: dict[str, int] | None, lowercase: bool) -> Any:
    model = tk.models.WordPiece(vocab=vocab, unk_token="[UNK]") if vocab else tk.models.WordPiece(
        unk_token="[UNK]")
    backend = tk.Tokenizer(model)
    backend.normalizer = tk.normalizers.BertNormalizer(lowercase=lowercase)
    backend.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    backend.decoder = tk.decoders.WordPiece()
    return backend


def _train_wordpiece(
    tk: Any, read: Callable[[], Iterable[str]], vocab_size: int, lowercase: bool,
    min_frequency: int, length: int | None,
) -> Any:
    """WordPiece training that gives the same vocabulary every time.

    ``tokenizers`` numbers the ``##x`` continuation pieces in hash-map order while it counts
    words, and breaks ties between equally frequent merges by those numbers, so the same text
    can give different vocabularies (huggingface/tokenizers#1794). A first pass collects the
    characters of the normalised text; handing every ``##x`` to the trainer up front, in sorted
    order, fixes their numbers. The trained vocabulary is then renumbered (specials, then the
    rest sorted) into a fresh tokenizer whose only special tokens are BERT's five: WordPiece
    only asks whether a piece is in the vocabulary, so numbering changes ids, not splits.
    """
    probe = _wordpiece_backend(tk, None, lowercase)
    chars: set[str] = set()
    for text in read():
        chars.update(probe.normalizer.normalize_str(text))
    pieces = ["##" + c for c in sorted(chars) if not c.isspace()]
    trainer = tk.trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[*_WORDPIECE_SPECIALS, *pieces],
        show_progress=False,
    )
    probe.train_from_iterator(read(), trainer, length=length)
    vocab = probe.get_vocab(with_added_tokens=True)
    rest = sorted(t for t in vocab if t not in _WORDPIECE_SPECIALS)
    ordered = {t: i for i, t in enumerate([*_WORDPIECE_SPECIALS, *rest])}
    backend = _wordpiece_backend(tk, ordered, lowercase)
    backend.add_special_tokens(list(_WORDPIECE_SPECIALS))
    return backend


def _check_kind(kind: Any) -> str:
    if kind not in TOKENIZER_KINDS:
        raise ConfigError(
            f"Unknown tokenizer type {kind!r}.{did_you_mean(str(kind), TOKENIZER_KINDS)} Choose "
            f"'wordpiece' (BERT) or 'bpe' (GPT-2 byte-level BPE)."
        )
    return kind


def build_tokenizer(spec: Any, texts: Any = None) -> TextTokenizer:
    """A tokenizer from a config value.

    Args:
        spec: A :class:`TextTokenizer`; a path (``tokenizer.json``, ``vocab.txt`` or a folder);
            or ``dict(type="wordpiece" | "bpe", vocab_size=..., lowercase=True,
            min_frequency=2)`` to train one on ``texts``.
        texts: A zero-argument callable returning an iterable of training strings, used only
            when ``spec`` asks for training. Defaults to None.

    Raises:
        ConfigError: a spec of the wrong shape, or training asked for without text.
        DataError: a tokenizer file that cannot be read.
    """
    if isinstance(spec, TextTokenizer):
        return spec
    if isinstance(spec, (str, os.PathLike)):
        return TextTokenizer.load(spec)
    if isinstance(spec, Mapping):
        opts = dict(spec)
        kind = _check_kind(opts.pop("type", None))
        allowed = ("vocab_size", "lowercase", "min_frequency")
        for key in opts:
            if key not in allowed:
                raise ConfigError(
                    f"Unknown tokenizer key '{key}'.{did_you_mean(str(key), allowed)} Keys: type, "
                    f"{', '.join(allowed)}."
                )
        if "vocab_size" not in opts:
            raise ConfigError("tokenizer=dict(type=...) needs vocab_size=... to train one.")
        if texts is None:
            raise ConfigError(
                "tokenizer=dict(...) trains a tokenizer, which needs the corpus text; give a "
                "tokenizer file instead."
            )
        return TextTokenizer.train(texts, kind, **opts)
    raise ConfigError(
        f"tokenizer must be a path or dict(type='wordpiece' | 'bpe', vocab_size=...), got "
        f"{type(spec).__name__} {spec!r}."
    )
