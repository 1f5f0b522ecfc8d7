"""BERT pre-training samples: masked language modelling with next-sentence or sentence-order
prediction, after Google's ``create_pretraining_data.py`` and Megatron-LM's BERT dataset.

At construction each document of the split is cut into chunks of consecutive sentences (a
fixed samples mapping, as Megatron builds). Every random choice of a sample (the A/B split,
the label, the random document, the truncation, the masks) is drawn when the sample is read,
from a generator seeded by the sampler's per-sample seed, so a sample is a pure function of
(seed, epoch, index) and each epoch sees new masks and labels (Google fixes them on disk,
``dupe_factor`` times; Megatron fixes them per sample). Differences from Google:

- The target length of short chunks (``short_seq_prob``) is drawn per chunk (as Megatron),
  not once per document.
- A chunk of one sentence is split inside the sentence at a random token, so every chunk
  gives an A and a B and NSP labels stay 50/50 (Google forces such a chunk to a random next;
  Megatron drops it). Pairs need chunks of at least two tokens; shorter ones are left out.
- With a random next sentence the rest of the chunk is not put back for the next chunk (a
  fixed mapping cannot); it is the real B of the same sample in other epochs.
- ``num_to_predict`` counts the candidate (non-special) tokens, not ``[CLS]`` and ``[SEP]``;
  random replacements are drawn from the non-special ids only.
- The same ``[CLS] A [SEP] B [SEP]`` layout and front-or-back truncation of the longer side.

The tokenizer may be WordPiece (BERT's ``[CLS] [SEP] [MASK] [PAD]``) or byte-level BPE with
RoBERTa's ``<s> </s> <mask> <pad>`` (``<s> A </s>``, the layout of RoBERTa's single segment):
whatever tokens the tokenizer's roles cls, sep, mask and pad name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from libai.registry import DATASETS
from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import did_you_mean

from .bert_chunks import choose_groups, chunk_documents, trim_counts
from .corpus import TextCorpus
from .gpt_dataset import check_int, key_parts, resolve_corpus

__all__ = ["BertPretrainingDataset", "NEXT_SENTENCE_TASKS"]

NEXT_SENTENCE_TASKS = ("nsp", "sop", None)
_IGNORE = -100  # label value cross_entropy skips (its default ignore_index)


@DATASETS.register_module()
class BertPretrainingDataset(Dataset):
    """Masked language modelling, with next-sentence (NSP) or sentence-order (SOP) prediction.

    Each sample is one chunk of consecutive sentences of a document (see the module docstring),
    split at a random sentence boundary into A and B:

    - ``"nsp"`` (BERT): half the time B is replaced by sentences from a random other document of
      the split (label 1; in a split of one document, from a random place in the same one);
      otherwise B is the real continuation (label 0).
    - ``"sop"`` (ALBERT; Megatron's BERT does the same): B always continues A; half the time the
      two are swapped (label 1).
    - ``None`` (RoBERTa-style): the whole chunk is one segment, no label.

    The pair is truncated to ``max_seq_length - 3`` tokens (``- 2`` for one segment) by removing
    tokens from the longer side, each from its front or back at random; then laid out as
    ``[CLS] A [SEP] B [SEP]`` and masked: ``round(masked_lm_prob * n)`` (at least 1, at most
    ``max_predictions_per_seq``) of its ``n`` non-special tokens are predicted; of those 80%
    become ``[MASK]``, 10% a random non-special token, 10% stay. With ``whole_word_masking`` the
    pieces of a word are chosen together: a WordPiece word starts at a token without ``##``, a
    byte-level BPE word at a token with the space marker ``Ġ``; each sentence starts a word.

    Args:
        corpus: A :class:`TextCorpus` whose tokenizer has cls, sep, mask and pad tokens
            (WordPiece, or BPE trained with ``special_tokens=["<s>", "<pad>", "</s>", "<unk>",
            "<mask>"]``), or a dict of ``load_corpus`` arguments.
        split: "train", "val", "test" or "all". Defaults to "train".
        split_ratios: Shares of train, val and test documents. Defaults to (0.9, 0.05, 0.05).
        max_seq_length: Tokens per sample, special tokens included. Defaults to 128.
        masked_lm_prob: Share of tokens to predict, in (0, 1). Defaults to 0.15.
        max_predictions_per_seq: At most this many predictions per sample. Defaults to None:
            ``ceil(max_seq_length * masked_lm_prob)`` (20 for 128, Google's value).
        short_seq_prob: Probability that a chunk aims at a shorter random length, so the model
            also sees short inputs. Defaults to 0.1.
        next_sentence: "nsp", "sop" or None. Defaults to "nsp".
        whole_word_masking: Mask all pieces of a word together. Defaults to False.
        seed: Seed of the samples mapping; the sample randomness comes from the sampler's keys
            (a plain int index uses ``sample_seed(seed, 0, index)``). Defaults to 0.

    Sample (int64 tensors; S = ``max_seq_length``, P = ``max_predictions_per_seq``):
        ``input_ids`` (S,) padded with ``[PAD]``; ``attention_mask`` (S,) 1 for tokens, 0 for
        padding; ``token_type_ids`` (S,) 0 for ``[CLS] A [SEP]``, 1 for ``B [SEP]``;
        ``mlm_positions`` (P,) sorted positions of the predicted tokens, padded with 0;
        ``mlm_labels`` (P,) their original ids, -100 in padding slots; ``next_sentence_label``
        () 0 = real next / in order, 1 = random / swapped (absent when ``next_sentence`` is None).

    Attributes:
        metainfo: ``vocab_size`` and ``max_seq_length`` (the engine checks them against the
            model), ``tokenizer`` (its source) and ``corpus`` (its name).

    Raises:
        ConfigError: a bad argument value, or a corpus whose tokenizer lacks one of the
            special tokens.
        DataError: an unknown or empty split, or a split with no usable chunk.
    """

    takes_sample_keys = True

    def __init__(
        self,
        corpus: TextCorpus | Mapping[str, Any],
        split: str = "train",
        split_ratios: Sequence[float] = (0.9, 0.05, 0.05),
        max_seq_length: int = 128,
        masked_lm_prob: float = 0.15,
        max_predictions_per_seq: int | None = None,
        short_seq_prob: float = 0.1,
        next_sentence: str | None = "nsp",
        whole_word_masking: bool = False,
        seed: int = 0,
    ) -> None:
        self._check_args(masked_lm_prob, short_seq_prob, next_sentence)
        name = type(self).__name__
        self.next_sentence = next_sentence
        self.max_seq_length = check_int(
            max_seq_length, "max_seq_length", name, 4 if next_sentence is None else 5
        )
        self.masked_lm_prob = float(masked_lm_prob)
        if max_predictions_per_seq is None:
            max_predictions_per_seq = math.ceil(self.max_seq_length * self.masked_lm_prob)
        self.max_predictions = check_int(
            max_predictions_per_seq, "max_predictions_per_seq", name, 1
        )
        self.whole_word_masking = bool(whole_word_masking)
        self.seed = check_int(seed, "seed", name, 0)
        self.corpus = resolve_corpus(corpus, name)
        self._read_tokenizer(self.corpus.tokenizer)
        self.tokens = self.corpus.tokens
        self.budget = self.max_seq_length - (2 if next_sentence is None else 3)
        self.samples = self._build_samples(split, split_ratios, float(short_seq_prob))
        self.metainfo = {
            "vocab_size": self.vocab_size,
            "max_seq_length": self.max_seq_length,
            "tokenizer": self.corpus.tokenizer.source,
            "corpus": self.corpus.name,
        }

    def _build_samples(
        self, split: str, split_ratios: Sequence[float], short_seq_prob: float
    ) -> np.ndarray:
        """(N, 4) rows ``(split document position, first sentence, end sentence, target)``."""
        self.docs = self.corpus.split_documents(split, split_ratios)  # (n,) sorted doc ids
        doc_offsets = np.asarray(self.tokens.doc_offsets)
        self.doc_sentences = np.stack([doc_offsets[self.docs], doc_offsets[self.docs + 1]], 1)
        rng = np.random.default_rng([self.seed, 0x5EB])  # the mapping's own stream
        first, end = self.doc_sentences[:, 0], self.doc_sentences[:, 1]
        chunks = chunk_documents(self.cum, first, end, self.budget, short_seq_prob, rng)
        if self.next_sentence is not None:  # a pair needs a token for A and one for B
            chunks = chunks[self.cum[chunks[:, 2]] - self.cum[chunks[:, 1]] >= 2]
        if not len(chunks):
            raise DataError(
                f"{type(self).__name__}: split '{split}' of corpus {self.corpus.name} has no "
                f"chunk of two tokens or more. Give the split more text, or use "
                f"next_sentence=None."
            )
        return chunks

    @staticmethod
    def _check_args(masked_lm_prob: Any, short_seq_prob: Any, next_sentence: Any) -> None:
        name = BertPretrainingDataset.__name__
        if next_sentence not in NEXT_SENTENCE_TASKS:
            raise ConfigError(
                f"{name}: unknown next_sentence={next_sentence!r}."
                f"{did_you_mean(str(next_sentence), ('nsp', 'sop'))} Choose 'nsp' "
                f"(next-sentence prediction), 'sop' (sentence order) or None (MLM only)."
            )
        if not isinstance(masked_lm_prob, (int, float)) or not 0 < masked_lm_prob < 1:
            raise ConfigError(
                f"{name}: masked_lm_prob must be in (0, 1), got {masked_lm_prob!r} (BERT: 0.15)."
            )
        if not isinstance(short_seq_prob, (int, float)) or not 0 <= short_seq_prob <= 1:
            raise ConfigError(
                f"{name}: short_seq_prob must be in [0, 1], got {short_seq_prob!r} (BERT: 0.1)."
            )

    def _read_tokenizer(self, tokenizer: Any) -> None:
        roles = ("cls", "sep", "mask", "pad")
        missing = [r for r in roles if getattr(tokenizer, f"{r}_id", None) is None]
        if missing:
            raise ConfigError(
                f"{type(self).__name__} needs a WordPiece tokenizer ([CLS] [SEP] [MASK] [PAD]) "
                f"or a BPE one with RoBERTa's <s> </s> <mask> <pad>, but the {tokenizer.kind} "
                f"tokenizer of corpus {self.corpus.name} has no {', '.join(missing)} token: "
                f"write the corpus with tokenizer=dict(type='wordpiece', vocab_size=...), or "
                f"dict(type='bpe', vocab_size=..., special_tokens=['<s>', '<pad>', '</s>', "
                f"'<unk>', '<mask>'])."
            )
        self.vocab_size = tokenizer.vocab_size
        self.pad_id, self.cls_id = tokenizer.pad_id, tokenizer.cls_id
        self.sep_id, self.mask_id = tokenizer.sep_id, tokenizer.mask_id
        self.is_special = np.zeros(self.vocab_size, dtype=bool)  # (V,) lookup table
        self.is_special[tokenizer.special_ids] = True
        self.random_ids = np.flatnonzero(~self.is_special)  # replacement candidates
        self.word_starts = np.asarray(tokenizer.word_starts, dtype=bool)  # (V,)

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def cum(self) -> np.ndarray:
        """(num_sentences + 1,) token offset of each sentence: the corpus memmap, which
        pickles as its path (an array copy would send the whole index to each worker)."""
        return self.tokens.sentence_offsets

    # ------------------------------------------------------------------ segments
    def _read(self, start: int, stop: int) -> np.ndarray:
        """(n, 2): the tokens of ``[start, stop)`` and 1 where a sentence starts (a word starts
        there whatever the token: byte-level BPE marks no space before a line's first word)."""
        out = np.zeros((stop - start, 2), dtype=np.int64)
        out[:, 0] = self.tokens.tokens[start:stop]
        cum = self.cum
        firsts = cum[np.searchsorted(cum, start) : np.searchsorted(cum, stop)]  # in the range
        out[np.asarray(firsts, dtype=np.int64) - start, 1] = 1
        return out

    def _random_segment(self, rng: np.random.Generator, doc: int, length: int) -> tuple[int, int]:
        """Token range of sentences from a random other document, about ``length`` tokens."""
        n = len(self.docs)
        other = doc if n == 1 else int(rng.integers(n - 1))
        other += int(n > 1 and other >= doc)  # skip the sample's own document
        first, end = self.doc_sentences[other]
        start = int(rng.integers(first, end))
        stop = int(np.searchsorted(self.cum, self.cum[start] + max(length, 1), side="left"))
        return int(self.cum[start]), int(self.cum[min(max(stop, start + 1), end)])

    def _segments(self, rng: np.random.Generator, row: np.ndarray) -> tuple[list, int | None]:
        """Token arrays of the segments (one or two) and the next-sentence label."""
        doc, first, end, target = (int(v) for v in row)
        lo, hi = int(self.cum[first]), int(self.cum[end])
        if self.next_sentence is None:
            return [self._read(lo, hi)], None
        if end - first >= 2:  # split between sentences, else inside the one sentence
            split = int(self.cum[rng.integers(first + 1, end)])
        else:
            split = lo + int(rng.integers(1, hi - lo))
        a, b = (lo, split), (split, hi)
        label = int(rng.random() < 0.5)
        if label and self.next_sentence == "nsp":
            b = self._random_segment(rng, doc, target - (split - lo))
        elif label:
            a, b = b, a
        return [self._read(*a), self._read(*b)], label

    def _truncate(self, rng: np.random.Generator, segments: list) -> list:
        if len(segments) == 1:
            cuts = [max(len(segments[0]) - self.budget, 0)]
        else:
            cuts = list(trim_counts(len(segments[0]), len(segments[1]), self.budget))
        out = []
        for seg, cut in zip(segments, cuts):
            front = int(rng.binomial(cut, 0.5)) if cut else 0  # a coin per token, as Google
            out.append(seg[front : len(seg) - (cut - front)])
        return out

    # ------------------------------------------------------------------- masking
    def _mask(
        self, rng: np.random.Generator, ids: np.ndarray, sentence_starts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mask ``ids`` (n,) in place; returns the predicted positions (k,) and their ids.
        ``sentence_starts`` (n,) bool: a word starts there (whole-word masking)."""
        cand = np.flatnonzero(~self.is_special[ids])  # (C,)
        num = min(
            self.max_predictions, len(cand), max(1, int(len(cand) * self.masked_lm_prob + 0.5))
        )
        if self.whole_word_masking and len(cand):
            # a word starts at a non-'##' (WordPiece) or a 'Ġ' (BPE) token, at a sentence's
            # first token, or after a special token
            starts = self.word_starts[ids[cand]] | sentence_starts[cand]
            starts |= np.r_[True, np.diff(cand) != 1]
            group = np.cumsum(starts) - 1  # (C,) word of each candidate
            chosen = choose_groups(np.bincount(group), num, rng)
            positions = cand[np.isin(group, chosen)]
        else:
            positions = np.sort(rng.choice(cand, num, replace=False))
        labels = ids[positions].copy()
        action = rng.random(len(positions))
        ids[positions[action < 0.8]] = self.mask_id
        randomised = positions[action >= 0.9]
        ids[randomised] = self.random_ids[rng.integers(len(self.random_ids), size=len(randomised))]
        return positions, labels

    def __getitem__(self, key: Any) -> dict[str, torch.Tensor]:
        index, seed, _ = key_parts(key, self.seed)
        if not 0 <= index < len(self.samples):
            raise IndexError(f"sample {index} out of range ({len(self.samples)} samples)")
        rng = np.random.default_rng(seed)
        segments, label = self._segments(rng, self.samples[index])
        segments = self._truncate(rng, segments)
        cls, sep = np.array([[self.cls_id, 1]]), np.array([[self.sep_id, 1]])
        parts = [cls, segments[0], sep] + ([segments[1], sep] if len(segments) == 2 else [])
        rows = np.concatenate(parts)  # (n, 2) n <= S: tokens, sentence starts
        seq = np.ascontiguousarray(rows[:, 0])  # (n,)
        n, n_first = len(seq), len(segments[0]) + 2
        positions, labels = self._mask(rng, seq, rows[:, 1].astype(bool))
        S, P = self.max_seq_length, self.max_predictions
        out = {
            "input_ids": np.full(S, self.pad_id, dtype=np.int64),
            "attention_mask": np.zeros(S, dtype=np.int64),
            "token_type_ids": np.zeros(S, dtype=np.int64),
            "mlm_positions": np.zeros(P, dtype=np.int64),
            "mlm_labels": np.full(P, _IGNORE, dtype=np.int64),
        }
        out["input_ids"][:n] = seq
        out["attention_mask"][:n] = 1
        out["token_type_ids"][n_first:n] = 1
        out["mlm_positions"][: len(positions)] = positions
        out["mlm_labels"][: len(labels)] = labels
        sample = {k: torch.from_numpy(v) for k, v in out.items()}
        if label is not None:
            sample["next_sentence_label"] = torch.tensor(label, dtype=torch.int64)
        return sample

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(corpus={self.corpus.name!r}, docs={len(self.docs)}, "
            f"samples={len(self)}, max_seq_length={self.max_seq_length}, "
            f"next_sentence={self.next_sentence!r})"
        )
