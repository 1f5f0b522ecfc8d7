"""GPT pre-training samples: a split's documents packed into contiguous blocks of tokens.

Follows Megatron-LM's GPT dataset (documents shuffled, concatenated, cut into ``seq_length + 1``
token windows that overlap by one token), with these differences:

- Each epoch is packed on its own, in a fresh document order drawn from ``(seed, epoch)``.
  Megatron concatenates the orders of all epochs into one index, so one sample can straddle two
  epochs and the sample count is fixed up front; here ``len(dataset)`` is one epoch and the
  epoch comes from the sampler's :class:`~libai.data.SampleKey`.
- Nothing is dropped: the last block of an epoch is padded (inputs with the end-of-document id,
  labels with -100, which ``cross_entropy`` ignores) instead of left out.
- There is no sample-level shuffle index: the sampler shuffles samples.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from libai.registry import DATASETS
from libai.utils.errors import ConfigError, DataError

from ..seeded import sample_seed
from .corpus import TextCorpus

__all__ = ["GPTDataset", "resolve_corpus"]

_IGNORE = -100  # label value cross_entropy skips (its default ignore_index)


def resolve_corpus(corpus: TextCorpus | Mapping[str, Any], owner: str) -> TextCorpus:
    """A :class:`TextCorpus` from a corpus or a dict of ``load_corpus`` keyword arguments.

    Args:
        corpus: The corpus, or e.g. ``dict(source="shakespeare", tokenizer=...)``.
        owner: The dataset class name, for messages.

    Raises:
        ConfigError: ``corpus`` is neither.
    """
    if isinstance(corpus, TextCorpus):
        return corpus
    if isinstance(corpus, Mapping):
        from .sources import load_corpus  # imported here: it pulls in file readers
        from .tokenizer import TOKENIZER_KINDS

        tokenizer, source = corpus.get("tokenizer"), corpus.get("source")
        kind = tokenizer.get("type") if isinstance(tokenizer, Mapping) else None
        if isinstance(tokenizer, Mapping) and kind not in TOKENIZER_KINDS:
            raise ConfigError(f"{owner}: corpus.tokenizer.type={kind!r} is not one of "
                              f"{', '.join(map(repr, TOKENIZER_KINDS))}.")
        try:
            return load_corpus(**corpus)
        except (ConfigError, DataError) as e:  # say which corpus the message is about
            raise type(e)(f"{owner}: corpus.source={source!r}: {e}") from e
    raise ConfigError(
        f"{owner}: corpus must be a TextCorpus or a dict of load_corpus arguments "
        f"(e.g. dict(source='shakespeare')), got {type(corpus).__name__}."
    )


def check_int(value: Any, name: str, owner: str, minimum: int) -> int:
    """``value`` as an int, or a ConfigError naming ``name`` when it is not an int >= minimum."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{owner}: {name} must be an int >= {minimum}, got {value!r}.")
    return int(value)


def key_parts(key: Any, seed: int) -> tuple[int, int, int]:
    """``(index, sample seed, epoch)`` of a :class:`SampleKey` or a plain index (epoch 0)."""
    if isinstance(key, tuple):
        return int(key[0]), int(key[1]), int(key[2])
    return int(key), sample_seed(seed, 0, int(key)), 0


@DATASETS.register_module()
class GPTDataset(Dataset):
    """Next-token prediction on contiguous blocks of a corpus split.

    Epoch ``e`` concatenates the split's documents in the order
    ``np.random.default_rng([seed, e]).permutation``; documents are not separated by anything
    beyond what the corpus holds (write it with ``append_eod`` to end each one with the
    end-of-document token). Sample ``i`` is the window of ``seq_length + 1`` tokens starting at
    token ``i * seq_length``: ``input_ids = window[:-1]``, ``labels = window[1:]``. Over an
    epoch the labels are every token but the first exactly once, so with ``T`` tokens in the
    split ``len(dataset) = ceil((T - 1) / seq_length)``.

    Take the epoch from the sampler: ``sampler=dict(type="DefaultSampler",
    seed_per_sample=True)`` yields :class:`~libai.data.SampleKey` s, which carry it; a plain
    int index reads epoch 0.

    Args:
        corpus: A :class:`TextCorpus`, or a dict of ``load_corpus`` arguments.
        split: "train", "val", "test" or "all". Defaults to "train".
        split_ratios: Shares of train, val and test documents. Defaults to (0.9, 0.05, 0.05).
        seq_length: Tokens per sample. Defaults to 128.
        seed: Seed of the per-epoch document order. Defaults to 0.

    Sample:
        ``input_ids`` (S,) int64 and ``labels`` (S,) int64, S = ``seq_length``; the last block
        of an epoch pads inputs with ``eod_id`` and labels with -100.

    Attributes:
        metainfo: ``vocab_size`` and ``max_seq_length`` (the engine checks them against the
            model), ``tokenizer`` (its source) and ``corpus`` (its name).

    Raises:
        ConfigError: a bad ``seq_length`` or ``seed``, or ``corpus`` of the wrong type.
        DataError: an unknown or empty split, or a split of fewer than two tokens.
    """

    takes_sample_keys = True

    def __init__(
        self,
        corpus: TextCorpus | Mapping[str, Any],
        split: str = "train",
        split_ratios: Sequence[float] = (0.9, 0.05, 0.05),
        seq_length: int = 128,
        seed: int = 0,
    ) -> None:
        name = type(self).__name__
        self.seq_length = check_int(seq_length, "seq_length", name, 1)
        self.seed = check_int(seed, "seed", name, 0)
        self.corpus = resolve_corpus(corpus, name)
        tokenizer = self.corpus.tokenizer
        tokenizer.require("eod", user=name)
        self.tokens = self.corpus.tokens
        self.eod_id = int(tokenizer.eod_id)
        self.docs = self.corpus.split_documents(split, split_ratios)  # (n,) sorted doc ids
        offsets = np.asarray(self.tokens.sentence_offsets)
        doc_first = np.asarray(self.tokens.doc_offsets)
        self.doc_starts = offsets[doc_first[self.docs]]  # (n,) first token of each document
        self.doc_lengths = offsets[doc_first[self.docs + 1]] - self.doc_starts  # (n,)
        self.num_tokens = int(self.doc_lengths.sum())
        if self.num_tokens < 2:
            raise DataError(
                f"{name}: split '{split}' of corpus {self.corpus.name} has {self.num_tokens} "
                f"token(s); next-token prediction needs at least 2. Give the split more text."
            )
        self._len = math.ceil((self.num_tokens - 1) / self.seq_length)
        self._epochs: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self.metainfo = {
            "vocab_size": tokenizer.vocab_size,
            "max_seq_length": self.seq_length,
            "tokenizer": tokenizer.source,
            "corpus": self.corpus.name,
        }

    def __len__(self) -> int:
        return self._len

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """``(order, bounds)`` of an epoch: split positions of its documents in packing order
        (n,) and where each starts in the concatenation, with the total last (n + 1,)."""
        if epoch not in self._epochs:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.docs))
            bounds = np.zeros(len(order) + 1, dtype=np.int64)
            np.cumsum(self.doc_lengths[order], out=bounds[1:])
            self._epochs[epoch] = (order, bounds)
            if len(self._epochs) > 2:  # an epoch's end and the next one's start, no more
                self._epochs.popitem(last=False)
        return self._epochs[epoch]

    def window(self, epoch: int, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the epoch's concatenation, as int64."""
        order, bounds = self.epoch_order(epoch)
        first = int(np.searchsorted(bounds, start, side="right")) - 1
        last = int(np.searchsorted(bounds, stop, side="left"))  # one past the last document
        pieces = []
        for k in range(first, last):
            lo = max(start, int(bounds[k])) - int(bounds[k])  # offsets inside the document
            hi = min(stop, int(bounds[k + 1])) - int(bounds[k])
            begin = int(self.doc_starts[order[k]])
            pieces.append(self.tokens.tokens[begin + lo : begin + hi])
        return np.concatenate(pieces).astype(np.int64)

    def __getitem__(self, key: Any) -> dict[str, torch.Tensor]:
        index, _, epoch = key_parts(key, self.seed)
        if not 0 <= index < self._len:
            raise IndexError(f"sample {index} out of range ({self._len} samples)")
        start = index * self.seq_length
        block = self.window(epoch, start, min(start + self.seq_length + 1, self.num_tokens))
        n = len(block) - 1  # predicted tokens; < seq_length only in the last block
        input_ids = np.full(self.seq_length, self.eod_id, dtype=np.int64)
        labels = np.full(self.seq_length, _IGNORE, dtype=np.int64)
        input_ids[:n] = block[:-1]
        labels[:n] = block[1:]
        return {"input_ids": torch.from_numpy(input_ids), "labels": torch.from_numpy(labels)}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(corpus={self.corpus.name!r}, docs={len(self.docs)}, "
            f"tokens={self.num_tokens}, seq_length={self.seq_length}, samples={self._len})"
        )
