"""TextTokenizer: training to an exact size, determinism, round trips, files it reads and writes."""

import hashlib

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


def test_training_is_deterministic_across_processes(wordpiece, bpe, run_process):
    # tokenizers' hash maps are seeded per process: the same text must still give one vocabulary
    # (a new interpreter: a fork would inherit this process's seeds)
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
    out = run_process("-c", code, here, timeout=120)
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


ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def test_bpe_with_roberta_special_tokens_puts_them_first_with_their_roles():
    tok = TextTokenizer.train(LINES, "bpe", 1200, special_tokens=ROBERTA_SPECIALS)
    assert [tok.id_to_token(i) for i in range(5)] == ROBERTA_SPECIALS
    assert tok.token_to_id("<|endoftext|>") is None
    roles = (tok.bos_id, tok.pad_id, tok.eos_id, tok.unk_id, tok.mask_id, tok.cls_id, tok.sep_id)
    assert roles == (0, 1, 2, 3, 4, 0, 2)
    assert tok.eod_id == 2 and tok.special_ids[:5].tolist() == [0, 1, 2, 3, 4]
    assert tok.decode(tok.encode("To be, or not")) == "To be, or not"  # still byte-level
    spec = build_tokenizer(dict(type="bpe", vocab_size=1200, special_tokens=ROBERTA_SPECIALS),
                           texts=lambda: LINES)
    assert spec.backend.to_str() == tok.backend.to_str()


def test_default_special_tokens_are_gpt2s_and_berts(wordpiece, bpe):
    assert bpe.special_tokens == {"bos": "<|endoftext|>", "eos": "<|endoftext|>"}
    assert (bpe.bos_id, bpe.eos_id, bpe.eod_id) == (0, 0, 0)
    assert wordpiece.bos_id is None and wordpiece.eos_id is None
    same = TextTokenizer.train(LINES, "bpe", 1000, special_tokens=["<|endoftext|>"])
    assert same.backend.to_str() == bpe.backend.to_str()


@pytest.mark.parametrize("specials, match", [
    ("<s>", "list of token strings"), ([], "list of token strings"), (["<s>", ""], "list of"),
    (["<s>", "<s>"], "twice"),
])
def test_bad_special_tokens_are_config_errors(specials, match):
    with pytest.raises(ConfigError, match=match):
        TextTokenizer.train(LINES, "bpe", 1000, special_tokens=specials)


def test_wordpiece_special_tokens_need_an_unknown_token():
    with pytest.raises(ConfigError, match=r"needs an unknown token: add '\[UNK\]'"):
        TextTokenizer.train(LINES, "wordpiece", 1000, special_tokens=["[CLS]", "[SEP]"])


def test_a_tokenizer_without_a_role_says_which_token_is_missing():
    tok = TextTokenizer.train(LINES, "bpe", 1000, special_tokens=["<pad>"])
    assert tok.eod_id is None and tok.pad_id is None  # <pad> alone makes no known family
    with pytest.raises(DataError, match=r"^GPTDataset needs the tokenizer's end-of-document "
                                        r"token .*has none: name it in tokenizer_config.json"):
        tok.require("eod", user="GPTDataset")
    bert = TextTokenizer.train(LINES, "bpe", 1000)
    with pytest.raises(DataError, match=r"cls token \(cls_token\), sep token \(sep_token\), mask"):
        bert.require("cls", "sep", "mask", "pad", user="BertPretrainingDataset")


TINY = ("the cat sat on the mat and the dog ran to the cat while a bird sang in the old tree "
        "by the quiet river near home").split()


def test_a_vocabulary_far_larger_than_the_corpus_warns_once(libai_log):
    assert len(TINY) == 27
    tok = TextTokenizer.train([" ".join(TINY)], "wordpiece", 30522)
    assert tok.vocab_size == 30522
    warned = [m for m in libai_log if "rows unused" in m]
    assert len(warned) == 1, libai_log
    n = 30522 - sum(1 for t in tok.backend.get_vocab() if t.startswith("[unused"))
    assert f"the corpus yields {n:,} tokens, so vocab_size=30,522 leaves {30522 - n:,} rows" \
        in warned[0] and f"set vocab_size near {n:,}" in warned[0]


def test_a_vocabulary_the_corpus_nearly_fills_does_not_warn(libai_log):
    TextTokenizer.train(LINES, "bpe", 1000)  # learns all 1000
    TextTokenizer.train(LINES, "bpe", 1500)  # learns 1,146: over half, filled quietly
    assert not [m for m in libai_log if "rows unused" in m]
