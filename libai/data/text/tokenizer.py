"""Tokenizers for the text datasets, on the ``tokenizers`` library (nothing hand-written).

Two kinds of model, as their references use them:

- ``"wordpiece"`` (BERT): BERT's normalizer (unicode clean-up, Chinese characters split,
  optional lower-casing and accent stripping), BERT's pre-tokenizer (whitespace and punctuation),
  WordPiece with ``##`` continuations; special tokens ``[PAD] [UNK] [CLS] [SEP] [MASK]`` get
  ids 0-4.
- ``"bpe"``: byte-level BPE as GPT-2 trains it (every string encodes, nothing is unknown),
  special token ``<|endoftext|>`` (id 0) separates documents; or other special tokens (e.g.
  RoBERTa's ``<s> <pad> </s> <unk> <mask>``). Any BPE ``tokenizer.json`` loads (Llama's too).

A tokenizer is trained offline from text in seconds (:meth:`TextTokenizer.train`, see
``tokenizer_training.py``), or loaded from a ``tokenizer.json`` (with the
``tokenizer_config.json`` beside it: a Hugging Face folder), a BERT ``vocab.txt`` or a GPT-2
``vocab.json`` + ``merges.txt`` (:meth:`TextTokenizer.load`). Which token pads, separates or
ends a document is found as ``special_tokens.py`` says.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import did_you_mean, refuse_unknown

from .special_tokens import (
    HF_KEYS,
    ROLES,
    beside,
    declared_role_files,
    missing_roles_line,
    read_declared_roles,
    resolve_roles,
)
from .tokenizer_training import check_special_tokens, train_backend

__all__ = ["TextTokenizer", "build_tokenizer", "TOKENIZER_KINDS"]

TOKENIZER_KINDS = ("wordpiece", "bpe")
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
        special_tokens: Role -> token text (roles: "pad", "unk", "cls", "sep", "mask",
            "bos", "eos"), over the conventions of the token families; what
            :meth:`load` reads from ``tokenizer_config.json``. Defaults to None.

    Attributes:
        vocab_size: Number of ids, added (special) tokens included.
        special_tokens: Role -> token text of the roles the tokenizer has (see
            ``special_tokens.py`` for how they are found).
        declared_special_tokens: Those of ``special_tokens`` that the conventions alone would
            not find (what :meth:`save` writes beside the file; a corpus cache key holds them).
        pad_id, unk_id, cls_id, sep_id, mask_id, bos_id, eos_id: The roles' ids, None for a
            role the tokenizer lacks (BERT: no bos/eos; GPT-2: only bos = eos =
            ``<|endoftext|>``).
        eod_id: The id that ends a document: the end of sequence (``<|endoftext|>``, ``</s>``,
            ``<|end_of_text|>``), else ``[SEP]`` (BERT); None when there is neither.
    """

    def __init__(self, backend: Any, kind: str | None = None, source: str | None = None,
                 special_tokens: Mapping[str, str] | None = None) -> None:
        self.backend = backend
        if kind is None:
            model_type = json.loads(backend.to_str())["model"]["type"]
            kind = {"WordPiece": "wordpiece", "BPE": "bpe"}.get(model_type)
            if kind is None:
                raise DataError(
                    f"Tokenizer {source or ''}: a {model_type} model; the text datasets take "
                    f"WordPiece (BERT) or BPE (GPT-2, RoBERTa, Llama) tokenizers."
                )
        self.kind = kind
        self.source = source
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        vocab = backend.get_vocab(with_added_tokens=True)
        added = backend.get_added_tokens_decoder().values()
        specials = {t.content for t in added if t.special}
        self.special_tokens = resolve_roles(vocab, specials, special_tokens, source)
        conventional = resolve_roles(vocab, specials)
        self.declared_special_tokens = {
            r: t for r, t in self.special_tokens.items() if conventional.get(r) != t}
        ids = {role: vocab[token] for role, token in self.special_tokens.items()}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id, self.bos_id, \
            self.eos_id = (ids.get(role) for role in ROLES)
        # a document ends with the end of sequence; BERT, which has none, ends it with [SEP]
        self.eod_id = self.eos_id if self.eos_id is not None else self.sep_id
        self._special_ids: np.ndarray | None = None
        self._word_starts: np.ndarray | None = None

    def require(self, *roles: str, user: str) -> None:
        """Check that the tokenizer has every special token of ``roles`` (names of
        :data:`~libai.data.text.special_tokens.ROLES`, or ``"eod"``).

        Args:
            *roles: The roles ``user`` reads, e.g. ``"cls", "sep", "mask", "pad"``.
            user: Who needs them, for the message (a dataset's class name).

        Raises:
            DataError: One line naming the missing token(s) and how to name them.
        """
        have = {role: getattr(self, f"{role}_id") for role in (*ROLES, "eod")}
        line = missing_roles_line(have, roles, user, self.source)
        if line is not None:
            raise DataError(line)

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
        order), the file BERT tools read. Special tokens whose roles the conventions would not
        find (:attr:`declared_special_tokens`, e.g. a Llama-3 chat model's ``eos_token``
        ``<|eot_id|>``) go into ``special_tokens_map.json`` beside it, which :meth:`load` reads.

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
            beside(path, "vocab.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        if self.declared_special_tokens:
            roles = {HF_KEYS[r]: t for r, t in self.declared_special_tokens.items()}
            beside(path, "special_tokens_map.json").write_text(
                json.dumps(roles, indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, lowercase: bool = True) -> TextTokenizer:
        """Load a ``tokenizer.json``, a BERT ``vocab.txt``, or a folder holding one of them
        (or GPT-2's ``vocab.json`` + ``merges.txt``): a Hugging Face model folder.

        The special tokens that ``tokenizer_config.json`` / ``special_tokens_map.json`` beside
        the file name (``bos_token``, ``eos_token``, ``pad_token``...) take their roles.

        Args:
            path: The file or folder.
            lowercase: For a ``vocab.txt``: lower-case input as uncased BERT models do.
                Defaults to True.

        Raises:
            DataError: nothing readable there (the message lists what was looked for), or a
                tokenizer_config.json naming a token the vocabulary lacks.
        """
        p = Path(path)
        if p.is_dir():
            for name in ("tokenizer.json", "vocab.txt"):
                if (p / name).is_file():
                    return cls.load(p / name, lowercase=lowercase)
            if (p / "vocab.json").is_file() and (p / "merges.txt").is_file():
                return cls._read(p, "bpe", lowercase)
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
        return cls._read(p, "wordpiece" if p.suffix == ".txt" else None, lowercase)

    @classmethod
    def _read(cls, p: Path, kind: str | None, lowercase: bool) -> TextTokenizer:
        declared = read_declared_roles(declared_role_files(p))
        try:
            if p.is_dir():  # GPT-2 / RoBERTa vocab.json + merges.txt
                from tokenizers.implementations import ByteLevelBPETokenizer

                backend = ByteLevelBPETokenizer(str(p / "vocab.json"), str(p / "merges.txt"))
            elif kind == "wordpiece":
                from tokenizers.implementations import BertWordPieceTokenizer

                backend = BertWordPieceTokenizer(str(p), lowercase=lowercase)
            else:
                backend = _tokenizers().Tokenizer.from_file(str(p))
        except Exception as e:  # the Rust library raises plain Exception for a bad file
            raise DataError(f"Cannot read tokenizer {p}: {e}") from e
        backend = getattr(backend, "_tokenizer", backend)  # the implementations wrap one
        return cls(backend, kind, source=str(p), special_tokens=declared)

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
        special_tokens: Sequence[str] | None = None,
    ) -> TextTokenizer:
        """Train a tokenizer on ``texts`` (an iterable of strings; read once, streaming).

        The result is deterministic for a given text (see :func:`_train_wordpiece` for how,
        since ``tokenizers``' own WordPiece training is not).

        Args:
            texts: The training text, e.g. one line per item: an iterable, or a callable that
                returns a fresh one. WordPiece reads it twice: a one-shot iterator is kept in
                memory for that, a callable or a list is not copied.
            kind: "wordpiece" (BERT) or "bpe" (byte-level BPE: GPT-2, RoBERTa).
            vocab_size: The exact vocabulary size wanted, special tokens included. When the
                text yields fewer tokens, unused special tokens fill the rest; when it yields
                under half of them, a warning says so and how many it yields.
            lowercase: Lower-case (and strip accents) before WordPiece. Ignored for BPE, which
                keeps every byte. Defaults to True.
            min_frequency: Merges must occur this often. Defaults to 2.
            length: Number of items in ``texts``, for the progress estimate. Defaults to None.
            special_tokens: The special tokens, at ids 0, 1, ... in this order, e.g.
                RoBERTa's ``["<s>", "<pad>", "</s>", "<unk>", "<mask>"]``; their roles follow
                the conventions of ``special_tokens.py``. Defaults to None: BERT's five for
                WordPiece, GPT-2's ``<|endoftext|>`` for BPE.

        Raises:
            ConfigError: an unknown kind, bad special tokens, or a vocabulary size below what
                the text needs.
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
        specials = check_special_tokens(kind, special_tokens)
        backend = train_backend(tk, read, kind, vocab_size, lowercase, min_frequency, length,
                                specials)
        return cls(backend, kind, source=f"trained {kind} ({vocab_size} tokens)")

    def __repr__(self) -> str:
        return f"TextTokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, source={self.source!r})"


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
            min_frequency=2, special_tokens=None)`` to train one on ``texts``.
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
        allowed = ("vocab_size", "lowercase", "min_frequency", "special_tokens")
        refuse_unknown(opts, allowed, lambda key: f"Unknown tokenizer key '{key}'", "Keys: type,")
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
