"""BertPretrainingDataset: determinism, masking statistics, sentence pairs, layout, errors."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch
from text_fixtures import shakespeare_documents, train_tokenizer, write_corpus

from libai.data import SampleKey, build_dataloader
from libai.data.text import BertPretrainingDataset, IndexedTokenDataset, TextCorpus
from libai.data.text.bert_chunks import trim_counts as _trim_counts
from libai.registry import DATASETS
from libai.utils.errors import ConfigError, DataError

KEYS = ("input_ids", "attention_mask", "token_type_ids", "mlm_positions", "mlm_labels")


@pytest.fixture(scope="module")
def docs():
    return shakespeare_documents(num_plays=6, max_lines=500)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, docs):
    tokenizer = train_tokenizer(docs, "wordpiece", 1500)
    return write_corpus(tmp_path_factory.mktemp("bert") / "wp", docs, tokenizer)


def samples(ds, n=400, epoch=0):
    return [ds[SampleKey(i % len(ds), 1000 * epoch + i, epoch)] for i in range(n)]


def original(sample):
    """The sequence before masking: the labels put back at their positions."""
    ids = sample["input_ids"].clone()
    k = int((sample["mlm_labels"] != -100).sum())
    ids[sample["mlm_positions"][:k]] = sample["mlm_labels"][:k]
    return ids[sample["attention_mask"].bool()].numpy()


def segments(sample, sep_id):
    ids = original(sample)
    seps = np.flatnonzero(ids == sep_id)
    if len(seps) == 1:
        return [ids[1 : seps[0]]]
    return [ids[1 : seps[0]], ids[seps[0] + 1 : seps[1]]]


def find(hay, needle):
    """Start indices where ``needle`` occurs in ``hay``."""
    if len(needle) > len(hay):
        return np.empty(0, dtype=np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(hay, len(needle))
    return np.flatnonzero((windows == needle).all(axis=1))


def label_share(ds, n=800):
    return np.mean([int(ds[SampleKey(i % len(ds), i, 0)]["next_sentence_label"]) for i in range(n)])


def chunk_tokens(ds, index):
    _, first, end, _ = ds.samples[index]
    return np.asarray(ds.tokens.tokens[ds.cum[first] : ds.cum[end]], dtype=np.int64)


def test_same_sample_in_two_objects_and_epochs_differ(corpus, tmp_path):
    other = TextCorpus(IndexedTokenDataset(corpus.tokens.prefix), corpus.tokenizer)
    a = BertPretrainingDataset(corpus, max_seq_length=64, whole_word_masking=True)
    b = BertPretrainingDataset(other, max_seq_length=64, whole_word_masking=True)
    assert np.array_equal(a.samples, b.samples) and len(a) > 50
    for i in (0, 7, len(a) - 1):
        for key in (i, SampleKey(i, 123, 2)):
            x, y = a[key], b[key]
            assert all(torch.equal(x[k], y[k]) for k in x)
    diff = [
        not torch.equal(a[SampleKey(i, i, 0)]["input_ids"], a[SampleKey(i, i + 7, 1)]["input_ids"])
        for i in range(20)
    ]
    assert sum(diff) >= 15  # new masks (and often a new pair) each epoch


def test_dataloader_workers_agree(corpus):
    ds = BertPretrainingDataset(corpus, max_seq_length=32)

    def batches(num_workers, epoch):
        cfg = dict(
            dataset=ds,
            sampler=dict(type="DefaultSampler", seed_per_sample=True),
            batch_size=8,
            num_workers=num_workers,
        )
        loader = build_dataloader(cfg, seed=5)
        assert loader.dataset is ds  # takes the keys itself, not wrapped
        loader.sampler.set_epoch(epoch)
        return [b for b, _ in zip(loader, range(3))]

    zero, two, later = batches(0, 0), batches(2, 0), batches(0, 1)
    for x, y in zip(zero, two):
        assert set(x) == {*KEYS, "next_sentence_label"}
        assert all(torch.equal(x[k], y[k]) for k in x)
    assert not torch.equal(zero[0]["input_ids"], later[0]["input_ids"])


def test_masking_statistics(corpus):
    ds = BertPretrainingDataset(corpus, max_seq_length=128, short_seq_prob=0.0)
    tok = corpus.tokenizer
    special = np.zeros(tok.vocab_size, bool)
    special[tok.special_ids] = True
    predicted = candidates = masked = kept = 0
    for s in samples(ds, 500):
        orig = original(s)
        k = int((s["mlm_labels"] != -100).sum())
        pos, labels = s["mlm_positions"][:k].numpy(), s["mlm_labels"][:k].numpy()
        n = int((~special[orig]).sum())
        assert k == min(ds.max_predictions, max(1, int(n * 0.15 + 0.5)))
        assert np.all(np.diff(pos) > 0) and not special[labels].any()  # specials never masked
        assert np.array_equal(orig[pos], labels)
        assert (s["mlm_positions"][k:] == 0).all()
        inputs = s["input_ids"][pos].numpy()
        masked += int((inputs == tok.mask_id).sum())
        kept += int((inputs == labels).sum())
        predicted, candidates = predicted + k, candidates + n
    # ~9,000 predictions: a binomial share's std is <= 0.5 / sqrt(9000) ~ 0.005, so 0.02 is
    # four std; the masked share sits a little above 0.15 because round() lifts 18.75 to 19.
    assert 0.14 < predicted / candidates < 0.16
    assert abs(masked / predicted - 0.8) < 0.02
    assert abs(kept / predicted - 0.1) < 0.02  # a random token equal to the original is rare
    assert abs(1 - (masked + kept) / predicted - 0.1) < 0.02


def test_whole_word_masking_masks_whole_words(corpus):
    ds = BertPretrainingDataset(corpus, max_seq_length=64, whole_word_masking=True)
    starts, multi = corpus.tokenizer.word_starts, 0
    for s in samples(ds, 300):
        orig = original(s)
        k = int((s["mlm_labels"] != -100).sum())
        chosen = np.zeros(len(orig), bool)
        chosen[s["mlm_positions"][:k].numpy()] = True
        cand = ~ds.is_special[orig]
        word = np.cumsum(starts[orig] | ~cand | np.r_[True, ~cand[:-1]])  # word of each token
        for w in np.unique(word[chosen]):
            assert chosen[word == w].all(), "a word was masked in part"
            multi += int((word == w).sum() > 1)
    assert multi > 20  # words of several pieces were chosen, so the check means something


def test_nsp_pairs_and_layout(corpus):
    ds = BertPretrainingDataset(corpus, max_seq_length=64)
    sep = corpus.tokenizer.sep_id
    for i, s in enumerate(samples(ds, 300)):
        n = int(s["attention_mask"].sum())
        assert (s["attention_mask"][:n] == 1).all() and (s["attention_mask"][n:] == 0).all()
        assert (s["input_ids"][n:] == corpus.tokenizer.pad_id).all()
        assert s["input_ids"][0] == corpus.tokenizer.cls_id and s["input_ids"][n - 1] == sep
        a, b = segments(s, sep)
        first = len(a) + 2
        assert (s["token_type_ids"][:first] == 0).all() and (
            s["token_type_ids"][first:n] == 1
        ).all()
        assert (s["token_type_ids"][n:] == 0).all() and len(a) and len(b)
        chunk, label = chunk_tokens(ds, i % len(ds)), int(s["next_sentence_label"])
        at_a, at_b = find(chunk, a), find(chunk, b)
        assert len(at_a)  # A always comes from the sample's chunk
        if label == 0:  # B follows A inside the chunk
            assert len(at_b) and at_b.max() >= at_a.min() + len(a)
        elif len(b) > 6:  # B from another document (a short B may recur by chance)
            own = np.asarray(corpus.tokens[int(ds.docs[ds.samples[i % len(ds), 0]])])
            assert not len(find(own, b))
    assert abs(label_share(ds) - 0.5) < 0.071  # 4 std of 800 fair coins


def test_truncation_matches_googles_loop():
    def google(len_a, len_b, budget):  # create_pretraining_data.py's truncate_seq_pair
        cut = [0, 0]
        while len_a + len_b > budget:
            if len_a > len_b:
                len_a, cut[0] = len_a - 1, cut[0] + 1
            else:
                len_b, cut[1] = len_b - 1, cut[1] + 1
        return tuple(cut)

    for len_a, len_b, budget in np.random.default_rng(0).integers(1, 40, (500, 3)):
        assert _trim_counts(int(len_a), int(len_b), int(budget) + 1) == google(
            len_a, len_b, budget + 1
        )


def test_sop_swaps_and_single_segment(corpus):
    sop = BertPretrainingDataset(corpus, max_seq_length=64, next_sentence="sop")
    for i, s in enumerate(samples(sop, 400)):
        a, b = segments(s, corpus.tokenizer.sep_id)
        chunk, label = chunk_tokens(sop, i % len(sop)), int(s["next_sentence_label"])
        first, second = (a, b) if label == 0 else (b, a)  # the corpus order
        at_first, at_second = find(chunk, first), find(chunk, second)
        assert at_second.max() >= at_first.min() + len(first)
    assert abs(label_share(sop) - 0.5) < 0.071
    one = BertPretrainingDataset(corpus, max_seq_length=48, next_sentence=None)
    for i, s in enumerate(samples(one, 100)):
        assert "next_sentence_label" not in s and (s["token_type_ids"] == 0).all()
        (seg,) = segments(s, corpus.tokenizer.sep_id)
        assert len(find(chunk_tokens(one, i % len(one)), seg))


def test_lengths_short_sequences_and_sentence_splits(tmp_path, corpus):
    ds = BertPretrainingDataset(corpus, max_seq_length=40, short_seq_prob=0.5)
    lengths = [int(s["attention_mask"].sum()) for s in samples(ds, 300)]
    assert max(lengths) <= 40 and min(lengths) < 20
    shapes = {k: tuple(v.shape) for k, v in ds[0].items()}
    P = ds.max_predictions  # ceil(40 * 0.15) = 6
    assert (
        shapes
        == {
            **dict.fromkeys(KEYS[:3], (40,)),
            **dict.fromkeys(KEYS[3:], (P,)),
            "next_sentence_label": (),
        }
        and P == 6
    )
    # documents of one long sentence: A and B are split inside the sentence
    tok = corpus.tokenizer
    rng = np.random.default_rng(0)
    docs = [[rng.integers(10, tok.vocab_size, 30).tolist()] for _ in range(5)]
    single = write_corpus(tmp_path / "one", docs, tok)
    ds = BertPretrainingDataset(single, split="all", max_seq_length=64, short_seq_prob=0.0)
    for i in range(len(ds)):
        s = ds[SampleKey(i, i, 0)]
        a, b = segments(s, tok.sep_id)
        if int(s["next_sentence_label"]) == 0:
            assert np.array_equal(np.concatenate([a, b]), chunk_tokens(ds, i))


def test_single_document_split_and_defaults(tmp_path, corpus):
    tok = corpus.tokenizer
    one = write_corpus(tmp_path / "one", [[tok.encode("to be or not to be")] * 20], tok)
    ds = BertPretrainingDataset(one, split="all", max_seq_length=32)
    labels = {int(ds[SampleKey(i % len(ds), i, 0)]["next_sentence_label"]) for i in range(40)}
    assert labels == {0, 1}  # the random B comes from the same (only) document
    assert BertPretrainingDataset(corpus).max_predictions == 20  # ceil(128 * 0.15), Google's 20
    assert ds.metainfo == {
        "vocab_size": tok.vocab_size,
        "max_seq_length": 32,
        "tokenizer": tok.source,
        "corpus": one.name,
    }


def test_built_from_registry_and_a_corpus_dict(corpus, monkeypatch):
    stub = types.ModuleType("libai.data.text.sources")
    stub.load_corpus = lambda **kw: corpus if kw == {"source": "stub"} else None
    monkeypatch.setitem(sys.modules, "libai.data.text.sources", stub)
    ds = DATASETS.build(
        dict(type="BertPretrainingDataset", corpus=dict(source="stub"), max_seq_length=32)
    )
    assert isinstance(ds, BertPretrainingDataset) and ds.corpus is corpus


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(max_seq_length=4), ConfigError, "max_seq_length must be an int >= 5"),
        (dict(max_seq_length=3, next_sentence=None), ConfigError, "must be an int >= 4"),
        (dict(masked_lm_prob=0.0), ConfigError, r"masked_lm_prob must be in \(0, 1\)"),
        (dict(masked_lm_prob=1.5), ConfigError, r"masked_lm_prob must be in \(0, 1\)"),
        (dict(short_seq_prob=-0.1), ConfigError, r"short_seq_prob must be in \[0, 1\]"),
        (dict(next_sentence="nps"), ConfigError, "Did you mean 'nsp'"),
        (dict(max_predictions_per_seq=0), ConfigError, "max_predictions_per_seq must be"),
        (dict(split="trian"), DataError, "Did you mean 'train'"),
        (dict(corpus="shakespeare"), ConfigError, "corpus must be a TextCorpus or a dict"),
    ],
)
def test_bad_arguments(corpus, kwargs, error, match):
    with pytest.raises(error, match=match):
        BertPretrainingDataset(**{"corpus": corpus, **kwargs})


def test_bpe_corpus_is_refused(tmp_path, docs):
    bpe = train_tokenizer(docs[:3], "bpe", 400)
    corpus = write_corpus(tmp_path / "bpe", docs[:3], bpe)
    with pytest.raises(ConfigError, match="needs a WordPiece tokenizer"):
        BertPretrainingDataset(corpus)
