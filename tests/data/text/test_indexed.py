"""The indexed token format: round trips, damaged or mismatched files, dtypes, pickling."""

import pickle

import numpy as np
import pytest

from libai.data.text import IndexedTokenDataset, IndexedTokenWriter, index_paths, token_dtype
from libai.utils.errors import DataError

DOCS = [
    [[1, 2, 3], [4, 5]],
    [[6]],
    [[7, 8], [], [9, 10, 11]],  # the empty sentence is dropped
]


def write(prefix, docs=DOCS, vocab_size=100):
    with IndexedTokenWriter(prefix, vocab_size) as w:
        for doc in docs:
            w.add_document(doc)
    return w


def test_round_trip_documents_sentences_and_offsets(tmp_path):
    w = write(tmp_path / "c")
    assert (w.num_docs, w.num_sentences, w.num_tokens) == (3, 5, 11)
    ds = IndexedTokenDataset(tmp_path / "c")
    assert len(ds) == 3 and ds.num_sentences == 5 and ds.num_tokens == 11
    assert ds[0].tolist() == [1, 2, 3, 4, 5] and ds[-1].tolist() == [7, 8, 9, 10, 11]
    assert [ds.sentence(j).tolist() for j in range(5)] == [
        [1, 2, 3],
        [4, 5],
        [6],
        [7, 8],
        [9, 10, 11],
    ]
    assert ds.doc_sentence_range(2) == (3, 5) and ds.doc_token_range(2) == (6, 11)
    assert ds.doc_lengths().tolist() == [5, 1, 5]
    assert ds.sentence_lengths().tolist() == [3, 2, 1, 2, 3]
    with pytest.raises(IndexError):
        ds.doc_sentence_range(3)


def test_numpy_sentences_and_empty_documents(tmp_path):
    with IndexedTokenWriter(tmp_path / "c", 10) as w:
        w.add_document([np.array([1, 2], dtype=np.int32)])
        w.add_document([[], []])  # no token at all: skipped
        w.add_document([])
    assert w.num_docs == 1 and w.skipped_docs == 2
    assert IndexedTokenDataset(tmp_path / "c")[0].tolist() == [1, 2]


@pytest.mark.parametrize(
    "vocab, dtype",
    [
        (256, np.uint8),
        (257, np.uint16),
        (65536, np.uint16),
        (65537, np.uint32),
        (2**32 + 1, np.uint64),
    ],
)
def test_token_dtype_is_the_smallest_that_holds_the_vocabulary(vocab, dtype):
    assert token_dtype(vocab) == np.dtype(dtype)


def test_file_dtype_follows_vocab_size(tmp_path):
    write(tmp_path / "small", vocab_size=200)
    write(tmp_path / "large", vocab_size=70000)
    small, large = IndexedTokenDataset(tmp_path / "small"), IndexedTokenDataset(tmp_path / "large")
    assert small.tokens.dtype == np.uint8 and large.tokens.dtype == np.uint32
    assert index_paths(tmp_path / "small")[0].stat().st_size == 11
    assert small[0].tolist() == large[0].tolist()


def test_id_outside_the_vocabulary_is_refused(tmp_path):
    with pytest.raises(DataError, match="Token id 100 is outside the vocabulary"):
        write(tmp_path / "c", docs=[[[1, 100]]], vocab_size=100)
    with pytest.raises(DataError, match="Token id -1"):
        write(tmp_path / "d", docs=[[[-1]]], vocab_size=100)
    assert not list(tmp_path.iterdir())  # temporary files removed


def test_all_empty_corpus_is_an_error_and_writes_nothing(tmp_path):
    with pytest.raises(DataError, match="has no text"):
        write(tmp_path / "c", docs=[[[]], []])
    assert not list(tmp_path.iterdir())


def test_failed_write_leaves_the_existing_corpus(tmp_path):
    write(tmp_path / "c")
    with pytest.raises(RuntimeError):
        with IndexedTokenWriter(tmp_path / "c", 100) as w:
            w.add_document([[42]])
            raise RuntimeError("boom")
    ds = IndexedTokenDataset(tmp_path / "c")
    assert ds[0].tolist() == [1, 2, 3, 4, 5]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.bin", "c.idx"]


def test_missing_files_name_the_tool(tmp_path):
    with pytest.raises(DataError, match=r"c\.idx not found.*preprocess_text\.py"):
        IndexedTokenDataset(tmp_path / "c")
    write(tmp_path / "c")
    (tmp_path / "c.bin").unlink()
    with pytest.raises(DataError, match=r"c\.bin not found"):
        IndexedTokenDataset(tmp_path / "c")


def test_truncated_bin_is_refused(tmp_path):
    write(tmp_path / "c")
    data = (tmp_path / "c.bin").read_bytes()
    (tmp_path / "c.bin").write_bytes(data[:-1])
    with pytest.raises(DataError, match="truncated or belongs to another index"):
        IndexedTokenDataset(tmp_path / "c")


def test_truncated_idx_is_refused(tmp_path):
    write(tmp_path / "c")
    data = (tmp_path / "c.idx").read_bytes()
    (tmp_path / "c.idx").write_bytes(data[:-8])
    with pytest.raises(DataError, match="truncated or damaged"):
        IndexedTokenDataset(tmp_path / "c")
    (tmp_path / "c.idx").write_bytes(data[:10])
    with pytest.raises(DataError, match="not a libai token index"):
        IndexedTokenDataset(tmp_path / "c")


def test_idx_paired_with_another_corpus_bin_is_refused(tmp_path):
    # same shape, different tokens: sizes agree, only the fingerprint tells them apart
    write(tmp_path / "a")
    write(tmp_path / "b", docs=[[[t + 1 for t in s] for s in d] for d in DOCS])
    (tmp_path / "a.bin").write_bytes((tmp_path / "b.bin").read_bytes())
    with pytest.raises(DataError, match=r"a\.bin does not belong to a\.idx"):
        IndexedTokenDataset(tmp_path / "a")


def test_idx_paired_with_a_bin_of_another_size_is_refused(tmp_path):
    write(tmp_path / "a")
    write(tmp_path / "b", docs=[[[1, 2]]])
    (tmp_path / "a.bin").write_bytes((tmp_path / "b.bin").read_bytes())
    with pytest.raises(DataError, match="belongs to another index"):
        IndexedTokenDataset(tmp_path / "a")


def test_pickling_reopens_instead_of_copying_the_tokens(tmp_path):
    docs = [[list(range(1, 1000))] for _ in range(50)]  # 50k tokens
    write(tmp_path / "c", docs=docs, vocab_size=1000)
    ds = IndexedTokenDataset(tmp_path / "c")
    blob = pickle.dumps(ds)
    assert len(blob) < 1000  # the path, not the 100 kB of tokens
    copy = pickle.loads(blob)
    assert isinstance(copy.tokens, np.memmap)
    assert np.array_equal(copy[7], ds[7]) and len(copy) == 50
