"""TextTokenizer: training to an exact size, determinism, round trips, files it reads and writes."""

import hashlib
import subprocess
import sys

import pytest
from text_fixtures import shakespeare_documents

from libai.data.text import TextTokenizer, build_tokenizer
from libai.utils.errors import ConfigError, DataError

LINES = [s for d in shakespeare_documents(num_plays=1, max_lines=600) for s in d]


@pytest.fixture(scope="module")
def wordpiece():
    return TextTokenizer.train(LINES, "wordpiece", 1000)


@pytest.fixture(scope="module")
def bpe():
    return TextTokenizer.train(LINES, "bpe", 1000)


@pytest.mark.parametrize("kind, unused", [("wordpiece", "[unused0]"), ("bpe", "<|unused_0|>")])
def test_exact_vocab_size_with_unused_fill(kind, unused):
    tok = TextTokenizer.train(LINES, kind, 3000)  # more than this text yields
    assert tok.vocab_size == 3000
    assert tok.token_to_id(unused) is not None
    assert max(tok.backend.get_vocab(with_added_tokens=True).values()) == 2999


def test_vocab_too_small_for_the_alphabet_is_a_config_error():
    with pytest.raises(ConfigError, match="too small.*vocab_size >="):
        TextTokenizer.train(LINES, "bpe", 10)


def test_special_ids(wordpiece, bpe):
    assert (
        wordpiece.pad_id,
        wordpiece.unk_id,
        wordpiece.cls_id,
        wordpiece.sep_id,
        wordpiece.mask_id,
    ) == (0, 1, 2, 3, 4)
    assert wordpiece.eod_id == wordpiece.sep_id
    assert bpe.id_to_token(bpe.eod_id) == "<|endoftext|>" and bpe.pad_id is None
    assert {0, 1, 2, 3, 4} <= set(wordpiece.special_ids.tolist())


def test_word_starts(wordpiece):
    starts = wordpiece.word_starts
    for token, i in list(wordpiece.backend.get_vocab().items())[:200]:
        assert starts[i] == (not token.startswith("##"))


def test_bpe_round_trip_is_exact_for_any_unicode(bpe):
    text = "Naïve café — 東京, ünïcödé! 🙂  two  spaces"
    assert bpe.decode(bpe.encode(text)) == text
    assert [bpe.decode(ids) for ids in bpe.encode_batch(LINES[:50])] == LINES[:50]


def test_wordpiece_round_trip_lowercases(wordpiece):
    text = "To be, or not to be: that is the question."
    decoded = wordpiece.decode(wordpiece.encode(text))
    assert "".join(decoded.split()) == "".join(text.lower().split())


def test_training_is_deterministic_within_a_process(wordpiece, bpe):
    assert (
        TextTokenizer.train(LINES, "wordpiece", 1000).backend.to_str() == wordpiece.backend.to_str()
    )
    assert TextTokenizer.train(iter(LINES), "bpe", 1000).backend.to_str() == bpe.backend.to_str()


def test_training_is_deterministic_across_processes(wordpiece, bpe):
    # tokenizers' hash maps are seeded per process: the same text must still give one vocabulary
    code = (
        "import hashlib, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from text_fixtures import shakespeare_documents\n"
        "from libai.data.text import TextTokenizer\n"
        "lines = [s for d in shakespeare_documents(num_plays=1, max_lines=600) for s in d]\n"
        "for kind in ('wordpiece', 'bpe'):\n"
        "    t = TextTokenizer.train(lines, kind, 1000)\n"
        "    print(hashlib.sha256(t.backend.to_str().encode()).hexdigest())\n"
    )
    here = str(__import__("pathlib").Path(__file__).parent)
    out = subprocess.run(
        [sys.executable, "-c", code, here], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    want = [hashlib.sha256(t.backend.to_str().encode()).hexdigest() for t in (wordpiece, bpe)]
    assert out.stdout.split() == want


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_save_and_load_tokenizer_json(tmp_path, kind, wordpiece, bpe):
    tok = wordpiece if kind == "wordpiece" else bpe
    path = tok.save(tmp_path / "corpus.tokenizer.json")
    assert path == tmp_path / "corpus.tokenizer.json"
    loaded = TextTokenizer.load(path)
    assert loaded.kind == kind and loaded.vocab_size == tok.vocab_size
    assert loaded.eod_id == tok.eod_id
    assert loaded.encode_batch(LINES[:100]) == tok.encode_batch(LINES[:100])
    assert (tmp_path / "corpus.vocab.txt").exists() == (kind == "wordpiece")


def test_vocab_txt_lists_ids_in_order_and_loads_to_the_same_ids(tmp_path, wordpiece):
    wordpiece.save(tmp_path)  # a folder: tokenizer.json + vocab.txt
    assert TextTokenizer.load(tmp_path).encode(LINES[0]) == wordpiece.encode(LINES[0])
    lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == wordpiece.vocab_size
    assert all(wordpiece.token_to_id(t) == i for i, t in enumerate(lines))
    from_vocab = TextTokenizer.load(tmp_path / "vocab.txt")
    assert from_vocab.kind == "wordpiece" and from_vocab.vocab_size == wordpiece.vocab_size
    assert from_vocab.encode_batch(LINES[:100]) == wordpiece.encode_batch(LINES[:100])


def test_load_errors_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="not found"):
        TextTokenizer.load(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataError, match="Cannot read tokenizer"):
        TextTokenizer.load(tmp_path / "bad.json")
    with pytest.raises(DataError, match="holds no tokenizer.json"):
        TextTokenizer.load(tmp_path)


def test_build_tokenizer_specs(tmp_path, bpe):
    assert build_tokenizer(bpe) is bpe
    bpe.save(tmp_path / "t.json")
    assert build_tokenizer(str(tmp_path / "t.json")).vocab_size == bpe.vocab_size
    tok = build_tokenizer(dict(type="bpe", vocab_size=600), texts=lambda: LINES)
    assert tok.kind == "bpe" and tok.vocab_size == 600


@pytest.mark.parametrize(
    "spec, match",
    [
        (dict(type="wordpeice", vocab_size=100), "Did you mean 'wordpiece'"),
        (dict(type="bpe", vocab_sise=100), "Did you mean 'vocab_size'"),
        (dict(type="bpe"), "needs vocab_size"),
        (dict(type="bpe", vocab_size=0), "positive int"),
        (42, "must be a path or dict"),
    ],
)
def test_bad_specs_are_config_errors(spec, match):
    with pytest.raises(ConfigError, match=match):
        build_tokenizer(spec, texts=lambda: LINES)


def test_training_spec_without_text_is_a_config_error():
    with pytest.raises(ConfigError, match="needs the corpus text"):
        build_tokenizer(dict(type="bpe", vocab_size=100))
