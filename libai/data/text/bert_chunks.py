"""The pure NumPy steps of :class:`~libai.data.text.bert_dataset.BertPretrainingDataset` that
decide a sample's shape: cutting documents into chunks of sentences (once, at construction),
trimming a pair to the budget and choosing the words to mask (per sample, from the sample's own
generator). Kept apart so they can be checked against Google's loops on their own.
"""

from __future__ import annotations

import numpy as np

__all__ = ["choose_groups", "chunk_documents", "trim_counts"]


def chunk_documents(
    cum: np.ndarray,
    first: np.ndarray,
    end: np.ndarray,
    budget: int,
    short_prob: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Group each document's sentences greedily into chunks that reach a target length.

    A chunk takes sentences until it holds at least its target number of tokens (``budget``,
    or with probability ``short_prob`` a random length in [2, budget]) or the document ends.
    All documents advance together, one chunk per round, so the loop runs as many times as the
    longest document has chunks, not once per sentence.

    Args:
        cum: (num_sentences + 1,) token offset of each sentence.
        first, end: (n,) first and end (exclusive) sentence of each document.
        budget: The full target length.
        short_prob: Probability of a shorter target.
        rng: The generator.

    Returns:
        (num_chunks, 4) int64 rows ``(document, first sentence, end sentence, target)`` in
        corpus order.
    """
    ptr = np.array(first, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    live = np.flatnonzero(ptr < end)
    rounds = []
    while len(live):
        target = np.full(len(live), budget, dtype=np.int64)
        short = rng.random(len(live)) < short_prob
        target[short] = rng.integers(2, budget + 1, size=int(short.sum()))
        start = ptr[live]
        stop = np.searchsorted(cum, cum[start] + target, side="left")
        stop = np.minimum(np.maximum(stop, start + 1), end[live])
        rounds.append(np.stack([live, start, stop, target], axis=1))
        ptr[live] = stop
        live = live[stop < end[live]]
    chunks = np.concatenate(rounds) if rounds else np.empty((0, 4), dtype=np.int64)
    return chunks[np.argsort(chunks[:, 1], kind="stable")]


def trim_counts(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
    """Tokens to remove from A and B so that ``len_a + len_b <= budget``.

    The closed form of Google's loop, which removes one token at a time from the longer side
    (from B on a tie): first the longer side shrinks to the other's length, then they alternate.
    """
    excess = len_a + len_b - budget
    if excess <= 0:
        return 0, 0
    cut_a = min(excess, max(len_a - len_b, 0))
    cut_b = min(excess - cut_a, max(len_b - len_a, 0))
    rest = excess - cut_a - cut_b
    return cut_a + rest // 2, cut_b + (rest + 1) // 2


def choose_groups(sizes: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Groups (words) to mask, in random order, skipping any that would exceed ``k`` tokens."""
    order = rng.permutation(len(sizes))
    if (sizes == 1).all():
        return order[:k]
    chosen, total = [], 0
    for g, size in zip(order.tolist(), sizes[order].tolist()):
        if total >= k:
            break
        if total + size <= k:  # as Google: a word too long for the rest is skipped, not cut
            chosen.append(g)
            total += size
    return np.asarray(chosen, dtype=np.int64)
