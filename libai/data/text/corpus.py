"""A tokenised corpus: its token ids on disk, its tokenizer, and the split of its documents."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from libai.utils.errors import DataError
from libai.utils.suggest import unknown

from .indexed import IndexedTokenDataset
from .tokenizer import TextTokenizer

__all__ = ["TextCorpus", "SPLITS"]

SPLITS = ("train", "val", "test", "all")


class TextCorpus:
    """An :class:`IndexedTokenDataset` with the tokenizer that wrote it.

    Args:
        tokens: The documents' token ids.
        tokenizer: The tokenizer the ids come from.
        name: A short name for messages (the corpus source). Defaults to "".

    Raises:
        DataError: the tokenizer's vocabulary is not the one the index was written with.
    """

    def __init__(self, tokens: IndexedTokenDataset, tokenizer: TextTokenizer, name: str = "") -> None:
        if tokens.vocab_size != tokenizer.vocab_size:
            raise DataError(
                f"The tokenizer ({tokenizer.source}) has {tokenizer.vocab_size} tokens but the "
                f"corpus {tokens.prefix} was written with a {tokens.vocab_size}-token vocabulary: "
                f"use the tokenizer saved with the corpus, or preprocess the text again."
            )
        self.tokens = tokens
        self.tokenizer = tokenizer
        self.name = name or tokens.prefix

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def split_documents(
        self, split: str, ratios: Sequence[float] = (0.9, 0.05, 0.05)
    ) -> np.ndarray:
        """The sorted document indices of ``split``.

        Documents are dealt once with a fixed permutation (numpy seed 0, independent of any run
        seed, so splits never leak into each other): the first ``ratios[0]`` share is ``train``,
        the next ``ratios[1]`` ``val``, the rest ``test``. ``"all"`` is every document.

        Args:
            split: "train", "val", "test" or "all".
            ratios: Shares of train, val and test; normalised to sum 1. Defaults to
                (0.9, 0.05, 0.05).

        Raises:
            DataError: an unknown split, bad ratios, or a split that gets no document.
        """
        if split not in SPLITS:
            raise DataError(unknown(f"Unknown split '{split}'", split, SPLITS, "Choose from"))
        n = self.tokens.num_docs
        if split == "all":
            return np.arange(n)
        r = np.asarray(ratios, dtype=np.float64)
        if r.shape != (3,) or (r < 0).any() or r.sum() <= 0:
            raise DataError(
                f"split_ratios must be three non-negative numbers (train, val, test), got {ratios!r}."
            )
        bounds = np.round(np.cumsum(r / r.sum()) * n).astype(np.int64)  # ends of train, val, test
        order = np.random.default_rng(0).permutation(n)
        start = {"train": 0, "val": bounds[0], "test": bounds[1]}[split]
        end = {"train": bounds[0], "val": bounds[1], "test": n}[split]
        docs = np.sort(order[start:end])
        if len(docs) == 0:
            raise DataError(
                f"Split '{split}' of corpus {self.name} is empty: {n} documents with "
                f"split_ratios={tuple(ratios)}. Give it a larger share, or use more documents."
            )
        return docs

    def __repr__(self) -> str:
        return f"TextCorpus({self.name!r}, {self.tokens!r}, {self.tokenizer!r})"
