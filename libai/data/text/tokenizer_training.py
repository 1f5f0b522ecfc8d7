"""Training a ``tokenizers`` backend to an exact vocabulary size: :func:`train_backend`.

What :meth:`libai.data.text.TextTokenizer.train` runs. Two kinds:

- ``"wordpiece"`` (BERT): BERT's normalizer and pre-tokenizer, WordPiece with ``##``
  continuations, special tokens ``[PAD] [UNK] [CLS] [SEP] [MASK]`` at ids 0-4 by default;
- ``"bpe"``: byte-level BPE, special token ``<|endoftext|>`` at id 0 by default (GPT-2), or
  the ones asked for in their order, e.g. RoBERTa's ``<s> <pad> </s> <unk> <mask>`` at 0-4.

When the text yields fewer tokens than asked for, unused special tokens fill the rest (as
BERT's own ``vocab.txt`` carries ``[unused*]`` entries), so the size in a config is the size the
model gets. When it yields less than half of it, a warning says so (:func:`_warn_if_sparse`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from libai.utils.errors import ConfigError
from libai.utils.logging import print_log

__all__ = ["DEFAULT_SPECIAL_TOKENS", "check_special_tokens", "train_backend"]

DEFAULT_SPECIAL_TOKENS = {
    "wordpiece": ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    "bpe": ("<|endoftext|>",),
}
_UNUSED = {"wordpiece": "[unused{}]", "bpe": "<|unused_{}|>"}
_WORDPIECE_UNKNOWN = ("[UNK]", "<unk>")
# Warn when the text yields fewer than this share of vocab_size: the rest are rows the model
# carries and never sees (a 27-word text asked for 30,522 tokens fills 99% of them).
SPARSE_SHARE = 0.5


def check_special_tokens(kind: str, special_tokens: Any) -> tuple[str, ...]:
    """The special tokens of a ``kind`` tokenizer: ``special_tokens`` checked, or the kind's
    default (:data:`DEFAULT_SPECIAL_TOKENS`) when None.

    Raises:
        ConfigError: Not a list of distinct non-empty strings, or a WordPiece list without an
            unknown token (``[UNK]`` or ``<unk>``).
    """
    if special_tokens is None:
        return DEFAULT_SPECIAL_TOKENS[kind]
    if isinstance(special_tokens, str) or not isinstance(special_tokens, Sequence) or not all(
            isinstance(t, str) and t for t in special_tokens) or not special_tokens:
        raise ConfigError(
            f"tokenizer special_tokens must be a list of token strings, e.g. ['<s>', '<pad>', "
            f"'</s>', '<unk>', '<mask>'], got {special_tokens!r}.")
    doubled = sorted({t for t in special_tokens if list(special_tokens).count(t) > 1})
    if doubled:
        raise ConfigError(f"tokenizer special_tokens lists {', '.join(doubled)} twice.")
    if kind == "wordpiece" and not any(t in special_tokens for t in _WORDPIECE_UNKNOWN):
        raise ConfigError(
            f"a WordPiece tokenizer needs an unknown token: add '[UNK]' (or '<unk>') to "
            f"special_tokens={list(special_tokens)!r}.")
    return tuple(special_tokens)


def train_backend(
    tk: Any, read: Callable[[], Iterable[str]], kind: str, vocab_size: int, lowercase: bool,
    min_frequency: int, length: int | None, special_tokens: tuple[str, ...],
) -> Any:
    """A ``tokenizers.Tokenizer`` of exactly ``vocab_size`` ids trained on ``read()``.

    Raises:
        ConfigError: ``vocab_size`` below what the alphabet and special tokens need.
    """
    if kind == "wordpiece":
        backend = _train_wordpiece(tk, read, vocab_size, lowercase, min_frequency, length,
                                   special_tokens)
    else:
        backend = tk.Tokenizer(tk.models.BPE())
        backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = tk.decoders.ByteLevel()
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(special_tokens),
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
        _warn_if_sparse(kind, got, vocab_size)
        backend.add_special_tokens([_UNUSED[kind].format(i) for i in range(vocab_size - got)])
    return backend


def _warn_if_sparse(kind: str, got: int, vocab_size: int) -> None:
    """One warning when the text yields under :data:`SPARSE_SHARE` of ``vocab_size`` tokens."""
    if got >= SPARSE_SHARE * vocab_size:
        return
    print_log(
        f"Tokenizer ({kind}): the corpus yields {got:,} tokens, so vocab_size={vocab_size:,} "
        f"leaves {vocab_size - got:,} rows unused (filled with unused tokens, never seen in "
        f"training); set vocab_size near {got:,}.",
        level="WARNING",
    )


def _wordpiece_backend(tk: Any, vocab: dict[str, int] | None, lowercase: bool, unk: str) -> Any:
    model = tk.models.WordPiece(vocab=vocab, unk_token=unk) if vocab else tk.models.WordPiece(
        unk_token=unk)
    backend = tk.Tokenizer(model)
    backend.normalizer = tk.normalizers.BertNormalizer(lowercase=lowercase)
    backend.pre_tokenizer = tk.pre_tokenizers.BertPreTokenizer()
    backend.decoder = tk.decoders.WordPiece()
    return backend


def _train_wordpiece(
    tk: Any, read: Callable[[], Iterable[str]], vocab_size: int, lowercase: bool,
    min_frequency: int, length: int | None, specials: tuple[str, ...],
) -> Any:
    """WordPiece training that gives the same vocabulary every time.

    ``tokenizers`` numbers the ``##x`` continuation pieces in hash-map order while it counts
    words, and breaks ties between equally frequent merges by those numbers, so the same text
    can give different vocabularies (huggingface/tokenizers#1794). A first pass collects the
    characters of the normalised text; handing every ``##x`` to the trainer up front, in sorted
    order, fixes their numbers. The trained vocabulary is then renumbered (specials, then the
    rest sorted) into a fresh tokenizer whose only special tokens are ``specials``: WordPiece
    only asks whether a piece is in the vocabulary, so numbering changes ids, not splits.
    """
    unk = next(t for t in _WORDPIECE_UNKNOWN if t in specials)
    probe = _wordpiece_backend(tk, None, lowercase, unk)
    chars: set[str] = set()
    for text in read():
        chars.update(probe.normalizer.normalize_str(text))
    pieces = ["##" + c for c in sorted(chars) if not c.isspace()]
    trainer = tk.trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[*specials, *(p for p in pieces if p not in specials)],
        show_progress=False,
    )
    probe.train_from_iterator(read(), trainer, length=length)
    vocab = probe.get_vocab(with_added_tokens=True)
    rest = sorted(t for t in vocab if t not in specials)
    ordered = {t: i for i, t in enumerate([*specials, *rest])}
    backend = _wordpiece_backend(tk, ordered, lowercase, unk)
    backend.add_special_tokens(list(specials))
    return backend
