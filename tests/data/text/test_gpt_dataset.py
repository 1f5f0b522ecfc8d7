"""GPTDataset: exact packing per epoch, epoch shuffling, determinism, edge cases, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from text_fixtures import shakespeare_documents, split_tokens, train_tokenizer, write_corpus

from libai.data import SampleKey, build_dataloader
from libai.data.text import GPTDataset, IndexedTokenDataset, TextCorpus
from libai.registry import DATASETS
from libai.utils.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(shakespeare_documents(num_plays=2, max_lines=400), "bpe", 600)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tokenizer):
    docs = shakespeare_documents(num_plays=6, max_lines=400)
    return write_corpus(tmp_path_factory.mktemp("gpt") / "bpe", docs, tokenizer, append_eod=True)


def epoch_stream(ds, epoch):
    """The epoch's concatenation, computed independently of the dataset."""
    order = np.random.default_rng([ds.seed, epoch]).permutation(len(ds.docs))
    return np.concatenate(split_tokens(ds.corpus, ds.docs[order]))


def unpack(ds, epoch):
    """Non-padding inputs and labels of every sample of an epoch, in order."""
    inputs, labels = [], []
    for i in range(len(ds)):
        s = ds[SampleKey(i, 0, epoch)]
        keep = s["labels"] != -100
        n = int(keep.sum())
        assert keep[:n].all() and s["input_ids"].shape == s["labels"].shape == (ds.seq_length,)
        assert (s["input_ids"][n:] == ds.eod_id).all()
        inputs.append(s["input_ids"][:n].numpy())
        labels.append(s["labels"][:n].numpy())
    return np.concatenate(inputs), np.concatenate(labels)


@pytest.mark.parametrize("seq_length", [16, 37])
def test_an_epoch_covers_every_token_once(corpus, seq_length):
    ds = GPTDataset(corpus, seq_length=seq_length)
    stream = epoch_stream(ds, 0)
    assert len(ds) == -(-(len(stream) - 1) // seq_length)
    inputs, labels = unpack(ds, 0)
    assert np.array_equal(labels, stream[1:]) and np.array_equal(inputs, stream[:-1])
    s = ds[3]  # a plain index is epoch 0, and a block is shifted by one token
    assert np.array_equal(s["input_ids"][1:], s["labels"][:-1])
    assert np.array_equal(s["input_ids"].numpy(), stream[3 * seq_length : 4 * seq_length])


def test_epochs_reorder_documents_not_tokens(corpus):
    ds = GPTDataset(corpus, split="train", seq_length=32)
    first, second = epoch_stream(ds, 0), epoch_stream(ds, 1)
    assert not np.array_equal(first, second)
    assert np.array_equal(np.sort(first), np.sort(second))
    _, labels = unpack(ds, 1)
    assert np.array_equal(labels, second[1:])
    eod = corpus.tokenizer.eod_id  # the corpus ends documents with EOD; none is added
    assert (first == eod).sum() == len(ds.docs)
    for epoch in (0, 1, 2, 0):  # the cache keeps two epochs; an old one is rebuilt the same
        assert torch.equal(
            ds[SampleKey(5, 0, epoch)]["labels"], ds[SampleKey(5, 9, epoch)]["labels"]
        )
    assert len(ds._epochs) <= 2


def test_same_samples_in_two_objects_and_loaders(corpus):
    other = TextCorpus(IndexedTokenDataset(corpus.tokens.prefix), corpus.tokenizer)
    a, b = GPTDataset(corpus, seq_length=24, seed=3), GPTDataset(other, seq_length=24, seed=3)
    for key in (0, 11, SampleKey(11, 1, 4), SampleKey(len(a) - 1, 1, 2)):
        assert all(torch.equal(a[key][k], b[key][k]) for k in ("input_ids", "labels"))

    def batches(num_workers, epoch):
        cfg = dict(
            dataset=a,
            sampler=dict(type="DefaultSampler", seed_per_sample=True),
            batch_size=4,
            num_workers=num_workers,
        )
        loader = build_dataloader(cfg, seed=1)
        assert loader.dataset is a
        loader.sampler.set_epoch(epoch)
        return [batch for batch, _ in zip(loader, range(3))]

    zero, two = batches(0, 1), batches(2, 1)
    assert all(torch.equal(x[k], y[k]) for x, y in zip(zero, two) for k in x)
    assert not torch.equal(zero[0]["input_ids"], batches(0, 0)[0]["input_ids"])


def test_one_huge_document_among_short_ones(tmp_path, tokenizer):
    rng = np.random.default_rng(0)
    docs = [[rng.integers(1, 600, 5000).tolist()]] + [[[7, 8, 9]]] * 4
    corpus = write_corpus(tmp_path / "huge", docs, tokenizer)
    ds = GPTDataset(corpus, split="all", seq_length=16)
    assert len(ds) == -(-(5012 - 1) // 16)
    for epoch in (0, 1):
        stream = epoch_stream(ds, epoch)
        inputs, labels = unpack(ds, epoch)
        assert np.array_equal(labels, stream[1:]) and np.array_equal(inputs, stream[:-1])


def test_a_split_of_one_short_document(tmp_path, tokenizer):
    corpus = write_corpus(tmp_path / "short", [[[5, 6, 7, 8, 9]]], tokenizer)
    ds = GPTDataset(corpus, split="all", seq_length=16)
    assert len(ds) == 1
    s = ds[SampleKey(0, 0, 3)]
    assert s["input_ids"][:4].tolist() == [5, 6, 7, 8] and s["labels"][:4].tolist() == [6, 7, 8, 9]
    assert (s["labels"][4:] == -100).all() and (s["input_ids"][4:] == tokenizer.eod_id).all()
    with pytest.raises(IndexError):
        ds[1]
    tiny = write_corpus(tmp_path / "tiny", [[[5]]], tokenizer)
    with pytest.raises(DataError, match="has 1 token"):
        GPTDataset(tiny, split="all")


def test_registry_and_metainfo(corpus):
    ds = DATASETS.build(dict(type="GPTDataset", corpus=corpus, split="val", seq_length=8))
    assert isinstance(ds, GPTDataset)
    assert ds.metainfo == {
        "vocab_size": 600,
        "max_seq_length": 8,
        "tokenizer": corpus.tokenizer.source,
        "corpus": corpus.name,
    }


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(seq_length=0), ConfigError, "seq_length must be an int >= 1"),
        (dict(seq_length=12.5), ConfigError, "seq_length must be an int"),
        (dict(seed=-1), ConfigError, "seed must be an int >= 0"),
        (dict(split="vali"), DataError, "Did you mean 'val'"),
        (dict(split_ratios=(1, 0, 0), split="test"), DataError, "is empty"),
        (dict(corpus=["a"]), ConfigError, "corpus must be a TextCorpus or a dict"),
    ],
)
def test_bad_arguments(corpus, kwargs, error, match):
    with pytest.raises(error, match=match):
        GPTDataset(**{"corpus": corpus, **kwargs})
