"""Reading text and JSON-lines corpora, and tokenising them into the indexed format."""

import json

import numpy as np
import pytest

from libai.data.text import (
    IndexedTokenDataset,
    TextTokenizer,
    preprocess_corpus,
    preprocess_documents,
    read_documents,
)
from libai.data.text import preprocess as pp
from libai.utils.errors import ConfigError, DataError

TEXT = "First sentence.\n  Second one.  \n\n\n\nA new document.\n\nÜnïcödé — 東京 🙂\n"
DOCS = [["First sentence.", "Second one."], ["A new document."], ["Ünïcödé — 東京 🙂"]]


@pytest.fixture(scope="module")
def bpe():
    lines = [s for d in DOCS for s in d] * 3 + ["the quick brown fox jumps over the lazy dog"]
    return TextTokenizer.train(lines, "bpe", 400)


def write_text(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(path, records, key="text"):
    lines = [json.dumps(r if isinstance(r, dict) else {key: r}) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------- reading
def test_text_format_sentences_per_line_blank_lines_between_documents(tmp_path):
    assert list(read_documents(write_text(tmp_path / "a.txt", TEXT))) == DOCS


def test_documents_never_span_files_and_keep_order(tmp_path):
    a = write_text(tmp_path / "a.txt", "one\ntwo")  # no final newline
    b = write_text(tmp_path / "b.txt", "\n\nthree\n")
    assert list(read_documents([a, b])) == [["one", "two"], ["three"]]
    assert list(read_documents([str(b), str(a)])) == [["three"], ["one", "two"]]


def test_byte_order_mark_and_windows_line_ends(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("\ufeffone\r\ntwo\r\n\r\nthree\r\n".encode())
    assert list(read_documents(path)) == [["one", "two"], ["three"]]


def test_jsonl_one_document_per_line_split_at_newlines(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", ["Line one.\nLine two.\n\n", "", "Solo", "  \n "])
    assert list(read_documents(path)) == [["Line one.", "Line two."], ["Solo"]]


def test_jsonl_key_and_format_choice(tmp_path):
    path = write_jsonl(tmp_path / "a.data", [{"body": "x\ny", "id": 1}])
    assert list(read_documents(path, fmt="jsonl", json_key="body")) == [["x", "y"]]
    assert list(read_documents(path)) == [[path.read_text().strip()]]  # auto: .data is text


def test_bad_json_line_names_file_and_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "ok"}\n\n{"text": oops}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"a\.jsonl, line 3: not valid JSON"):
        list(read_documents(path))


def test_missing_key_names_it_and_the_keys_present(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"txt": "x", "id": 3}])
    with pytest.raises(DataError, match=r"line 1: no key 'text' \(keys: 'txt', 'id'\)"):
        list(read_documents(path))
    with pytest.raises(DataError, match="a JSON list"):
        list(read_documents(write_text(tmp_path / "b.jsonl", "[1, 2]\n")))
    with pytest.raises(DataError, match="'text' holds a int"):
        list(read_documents(write_jsonl(tmp_path / "c.jsonl", [{"text": 5}])))


def test_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("fine\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin\.txt, line 2: not UTF-8"):
        list(read_documents(path))


def test_missing_inputs_fail_before_reading(tmp_path):
    with pytest.raises(DataError, match=r"Input file .*nope\.txt not found"):
        read_documents([write_text(tmp_path / "a.txt", "x"), tmp_path / "nope.txt"])
    with pytest.raises(DataError, match="is a folder"):
        read_documents(tmp_path)
    with pytest.raises(DataError, match="No input files"):
        read_documents([])
    with pytest.raises(ConfigError, match="Did you mean 'jsonl'"):
        read_documents(tmp_path / "a.txt", fmt="jsonn")


# ------------------------------------------------------------------------ preprocessing
def test_round_trip_through_the_indexed_format(tmp_path, bpe):
    src = write_text(tmp_path / "a.txt", TEXT)
    stats = preprocess_corpus(src, tmp_path / "out" / "c", bpe, progress=False)
    assert (stats["docs"], stats["sentences"], stats["skipped_docs"]) == (3, 4, 0)
    assert stats["dtype"] == "uint16" and stats["workers"] == 1 and stats["seconds"] > 0
    ds = IndexedTokenDataset(tmp_path / "out" / "c")
    assert ds.num_tokens == stats["tokens"]
    got = [[bpe.decode(ds.sentence(j)) for j in range(*ds.doc_sentence_range(i))] for i in range(3)]
    assert got == DOCS


def test_tokenizer_is_saved_beside_the_corpus(tmp_path, bpe):
    src = write_text(tmp_path / "a.txt", TEXT)
    stats = preprocess_corpus(src, tmp_path / "c", bpe, progress=False)
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("c."))
    assert names == ["c.bin", "c.idx", "c.tokenizer.json"]
    assert [p.rsplit("/", 1)[-1] for p in stats["files"]] == names
    assert (
        TextTokenizer.load(tmp_path / "c.tokenizer.json").backend.to_str() == bpe.backend.to_str()
    )
    wordpiece = TextTokenizer.train([s for d in DOCS for s in d], "wordpiece", 300)
    preprocess_corpus(src, tmp_path / "w", wordpiece, progress=False)
    assert (tmp_path / "w.vocab.txt").is_file() and (tmp_path / "w.tokenizer.json").is_file()


def test_append_eod_ends_each_documents_last_sentence(tmp_path, bpe):
    src = write_text(tmp_path / "a.txt", TEXT)
    plain = preprocess_corpus(src, tmp_path / "p", bpe, progress=False)
    stats = preprocess_corpus(src, tmp_path / "e", bpe, append_eod=True, progress=False)
    assert stats["tokens"] == plain["tokens"] + 3 and stats["sentences"] == plain["sentences"]
    ds = IndexedTokenDataset(tmp_path / "e")
    for i in range(len(ds)):
        doc = ds[i].tolist()
        assert doc[-1] == bpe.eod_id and bpe.eod_id not in doc[:-1]
        last = ds.sentence(ds.doc_sentence_range(i)[1] - 1).tolist()
        assert last[-1] == bpe.eod_id and len(last) > 1  # joined to the sentence, not alone


def test_empty_corpus_is_one_data_error_and_writes_nothing(tmp_path, bpe):
    src = write_jsonl(tmp_path / "a.jsonl", ["", "\n  \n"])
    with pytest.raises(DataError, match=r"No text in .*a\.jsonl: every document was empty"):
        preprocess_corpus(src, tmp_path / "out" / "c", bpe, progress=False)
    assert not list((tmp_path / "out").iterdir())


def test_empty_documents_are_counted_as_skipped(tmp_path, bpe):
    src = write_jsonl(tmp_path / "a.jsonl", ["one", "", "two"])
    stats = preprocess_corpus(src, tmp_path / "c", bpe, progress=False)
    assert stats["docs"] == 2 and stats["skipped_docs"] == 1


def test_failed_run_leaves_the_existing_corpus(tmp_path, bpe):
    good = write_text(tmp_path / "a.txt", TEXT)
    preprocess_corpus(good, tmp_path / "c", bpe, progress=False)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("c.")}
    bad = write_jsonl(tmp_path / "b.jsonl", ["fine", {"oops": 1}])
    with pytest.raises(DataError, match="no key 'text'"):
        preprocess_corpus(bad, tmp_path / "c", bpe, progress=False)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("c.")}
    assert after == before


def test_documents_in_memory_and_a_tokenizer_file(tmp_path, bpe):
    bpe.save(tmp_path / "tok.json")
    stats = preprocess_documents(DOCS, tmp_path / "c", tmp_path / "tok.json", progress=False)
    assert stats["docs"] == 3
    assert IndexedTokenDataset(tmp_path / "c")[2].tolist() == bpe.encode(DOCS[2][0])


def test_progress_bar_off_a_terminal_is_silent(tmp_path, bpe, capsys):
    preprocess_corpus(write_text(tmp_path / "a.txt", TEXT), tmp_path / "c", bpe, progress=True)
    assert capsys.readouterr().out == ""


@pytest.mark.usefixtures("run_process")  # slow: the pool spawns its worker processes
def test_worker_pool_matches_in_process_and_keeps_few_chunks_in_flight(tmp_path, monkeypatch, bpe):
    monkeypatch.setattr(pp, "_CHUNK_CHARS", 200)  # many small chunks
    docs = [[f"document {i} sentence {j} with some words" for j in range(5)] for i in range(200)]
    read = []

    def generate():
        for i, doc in enumerate(docs):
            read.append(i)
            yield doc

    written = []
    original = pp._write_encoded
    monkeypatch.setattr(
        pp, "_write_encoded", lambda w, e: (written.append(len(read)), original(w, e))
    )
    preprocess_documents(generate(), tmp_path / "pool", bpe, workers=2, progress=False)
    preprocess_documents(docs, tmp_path / "local", bpe, workers=0, progress=False)
    pool, local = IndexedTokenDataset(tmp_path / "pool"), IndexedTokenDataset(tmp_path / "local")
    assert np.array_equal(pool.tokens, local.tokens)
    assert np.array_equal(pool.sentence_offsets, local.sentence_offsets)
    assert np.array_equal(pool.doc_offsets, local.doc_offsets)
    # each chunk is 1-2 documents; 2 workers x 2 tasks may be in flight when the first is written
    assert written[0] <= 2 * pp._TASKS_PER_WORKER * 2 + 2


@pytest.mark.usefixtures("run_process")  # slow: the pool spawns its worker processes
def test_a_worker_that_dies_is_an_error_not_a_hang(tmp_path, bpe):
    broken = TextTokenizer(bpe.backend, "bpe")
    # a role naming a token the vocabulary lacks: the worker's tokenizer fails to load, so the
    # worker dies starting
    broken.special_tokens = {"eos": "<no such token>"}
    with pytest.raises(DataError, match="A tokenising worker process died"):
        preprocess_documents(DOCS * 10, tmp_path / "c", broken, workers=2, progress=False)
    assert not list(tmp_path.iterdir())
