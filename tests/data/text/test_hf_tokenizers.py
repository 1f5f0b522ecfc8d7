"""Hugging Face tokenizer folders as libai tokenizers: made here the way ``transformers`` saves
them (no download), then read by TextTokenizer, a fine-tuning dataset and a pretraining corpus."""

import json
from pathlib import Path

import numpy as np
import pytest
from text_fixtures import shakespeare_documents

from libai.data.text import GPTDataset, TextTokenizer, load_corpus, resolve_tokenizer
from libai.utils.errors import DataError

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

LINES = [s for d in shakespeare_documents(num_plays=1, max_lines=400) for s in d]
PROBES = [*LINES[:200], "Naïve café — 東京, ünïcödé! 🙂  two  spaces", "  lead", "x\n\ny", ""]
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
# Llama-3's pre-tokenizer: its split pattern, then bytes (tiktoken's cl100k pattern)
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def byte_level_bpe(specials, llama3=False, vocab_size=700):
    tk = tokenizers
    backend = tk.Tokenizer(tk.models.BPE())
    if llama3:
        backend.pre_tokenizer = tk.pre_tokenizers.Sequence([
            tk.pre_tokenizers.Split(tk.Regex(LLAMA3_SPLIT), behavior="isolated"),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, show_progress=False,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(LINES, trainer)
    return backend


def llama3_folder(folder, eos="<|eot_id|>"):
    """A Llama-3 style tokenizer as ``PreTrainedTokenizerFast.save_pretrained`` writes it."""
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=byte_level_bpe(LLAMA3_SPECIALS, llama3=True),
        bos_token="<|begin_of_text|>", eos_token=eos)
    fast.save_pretrained(folder)
    return folder


def roberta_folder(folder):
    """A RoBERTa tokenizer as ``RobertaTokenizerFast.save_pretrained`` writes it."""
    backend = byte_level_bpe(ROBERTA_SPECIALS)
    model = json.loads(backend.to_str())["model"]
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "vocab.json").write_text(json.dumps(model["vocab"]), encoding="utf-8")
    merges = ["#version: 0.2"] + [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (folder / "src" / "merges.txt").write_text("\n".join(merges) + "\n", encoding="utf-8")
    cls = transformers.RobertaTokenizerFast
    files = (str(folder / "src" / "vocab.json"), str(folder / "src" / "merges.txt"))
    try:  # transformers 5 takes vocab= / merges=, 4 vocab_file= / merges_file=
        fast = cls(vocab=files[0], merges=files[1])
    except TypeError:
        fast = cls(vocab_file=files[0], merges_file=files[1])
    fast.save_pretrained(folder / "hf")
    return folder / "hf"


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    return llama3_folder(tmp_path_factory.mktemp("llama3"))


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    return roberta_folder(tmp_path_factory.mktemp("roberta"))


def assert_encodes_as_hf(tok, folder):
    hf = transformers.AutoTokenizer.from_pretrained(folder)
    want = [hf(text, add_special_tokens=False)["input_ids"] for text in PROBES]
    assert tok.encode_batch(PROBES) == want
    assert tok.vocab_size == len(hf)
    return hf


@pytest.mark.parametrize("which", ["folder", "tokenizer.json"])
def test_llama3_folder_encodes_as_autotokenizer_with_its_declared_roles(llama3, which):
    tok = TextTokenizer.load(llama3 if which == "folder" else llama3 / "tokenizer.json")
    hf = assert_encodes_as_hf(tok, llama3)
    assert tok.kind == "bpe"
    assert (tok.bos_id, tok.eos_id) == (hf.bos_token_id, hf.eos_token_id) == (0, 5)
    assert tok.eod_id == 5  # the declared eos_token <|eot_id|>, over <|end_of_text|>
    assert tok.pad_id is None and tok.mask_id is None
    assert tok.declared_special_tokens == {"eos": "<|eot_id|>"}


def test_llama3_without_its_config_takes_the_convention(llama3, tmp_path):
    (tmp_path / "t.json").write_text((llama3 / "tokenizer.json").read_text(encoding="utf-8"))
    tok = TextTokenizer.load(tmp_path / "t.json")  # no tokenizer_config.json beside it
    assert (tok.bos_id, tok.eos_id, tok.eod_id) == (0, 1, 1)  # <|end_of_text|>


def test_roberta_folder_encodes_as_autotokenizer_with_its_roles(roberta):
    tok = resolve_tokenizer(str(roberta))  # a fine-tuning dataset's tokenizer=
    hf = assert_encodes_as_hf(tok, roberta)
    got = (tok.bos_id, tok.pad_id, tok.eos_id, tok.unk_id, tok.mask_id, tok.cls_id, tok.sep_id)
    want = (hf.bos_token_id, hf.pad_token_id, hf.eos_token_id, hf.unk_token_id,
            hf.mask_token_id, hf.cls_token_id, hf.sep_token_id)
    assert got == want == (0, 1, 2, 3, 4, 0, 2) and tok.eod_id == 2
    tok.require("cls", "sep", "mask", "pad", user="BertPretrainingDataset")


def test_roberta_vocab_json_and_merges_txt_alone(roberta):
    tok = TextTokenizer.load(roberta.parent / "src")  # vocab.json + merges.txt, no configs
    assert_encodes_as_hf(tok, roberta)
    assert (tok.cls_id, tok.pad_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 4)


def test_llama2_conventions(tmp_path):
    backend = byte_level_bpe(["<unk>", "<s>", "</s>"])
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=backend)  # no roles declared
    fast.save_pretrained(tmp_path)
    tok = TextTokenizer.load(tmp_path)
    assert (tok.unk_id, tok.bos_id, tok.eos_id, tok.eod_id) == (0, 1, 2, 2)
    assert tok.cls_id is None and tok.mask_id is None  # not RoBERTa: no <mask>
    assert_encodes_as_hf(tok, tmp_path)


def test_a_declared_token_the_vocabulary_lacks_is_a_data_error(llama3, tmp_path):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_text((llama3 / name).read_text(encoding="utf-8"))
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "pad_token": "<pad>"}))
    with pytest.raises(DataError, match=r"pad_token='<pad>' is not in its vocabulary"):
        TextTokenizer.load(tmp_path)


def test_dict_valued_special_tokens_are_read(llama3, tmp_path):
    (tmp_path / "tokenizer.json").write_text((llama3 / "tokenizer.json").read_text())
    (tmp_path / "special_tokens_map.json").write_text(json.dumps(
        {"eos_token": {"content": "<|end_header_id|>", "lstrip": False}}))
    assert TextTokenizer.load(tmp_path).eos_id == 4


def test_saved_roles_survive_a_round_trip(llama3, tmp_path):
    tok = TextTokenizer.load(llama3)
    path = tok.save(tmp_path / "corpus.tokenizer.json")
    stored = json.loads((tmp_path / "corpus.special_tokens_map.json").read_text())
    assert stored == {"eos_token": "<|eot_id|>"}
    assert TextTokenizer.load(path).eod_id == 5
    trained = TextTokenizer.train(LINES, "bpe", 600)  # conventional roles: no extra file
    trained.save(tmp_path / "plain")
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == ["tokenizer.json"]


def test_pretraining_corpus_with_a_hugging_face_tokenizer(llama3, tmp_path):
    text = tmp_path / "docs.txt"
    text.write_text("\n\n".join(LINES[i] + "\n" + LINES[i + 1] for i in range(0, 60, 2)) + "\n")
    cache = tmp_path / "cache"
    corpus = load_corpus(text, tokenizer=str(llama3), cache_dir=cache)
    assert corpus.tokenizer.eod_id == 5 and corpus.tokens[0][-1] == 5  # <|eot_id|> ends docs
    first = [*corpus.tokenizer.encode(LINES[0]), *corpus.tokenizer.encode(LINES[1])]
    assert corpus.tokens[0][:-1].tolist() == first
    again = load_corpus(text, tokenizer=llama3 / "tokenizer.json", cache_dir=cache)
    assert again.tokens.prefix == corpus.tokens.prefix  # reused: its roles read back
    assert again.tokenizer.eod_id == 5
    assert Path(again.tokens.prefix + ".special_tokens_map.json").is_file()
    other = llama3_folder(tmp_path / "base", eos="<|end_of_text|>")
    base = load_corpus(text, tokenizer=other, cache_dir=cache)
    assert base.tokens.prefix != corpus.tokens.prefix and base.tokens[0][-1] == 1
    data = GPTDataset(dict(source=str(text), tokenizer=str(llama3), cache_dir=str(cache)),
                      split="all", seq_length=16)
    assert data.eod_id == 5 and len(data) > 0


def test_corpus_whose_tokenizer_cannot_end_a_document_says_so(tmp_path):
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=byte_level_bpe(["<pad>"]))
    fast.save_pretrained(tmp_path / "tok")
    text = tmp_path / "docs.txt"
    text.write_text("one doc\n\nanother doc\n")
    with pytest.raises(DataError, match=r"^GPTDataset: .*append_eod=True needs the tokenizer's "
                                        r"end-of-document token") as e:
        GPTDataset(dict(source=str(text), tokenizer=str(tmp_path / "tok"),
                        cache_dir=str(tmp_path / "cache")))
    assert "\n" not in str(e.value)
    corpus = load_corpus(text, tokenizer=tmp_path / "tok", cache_dir=tmp_path / "cache",
                         append_eod=False)  # a corpus without document ends builds
    assert np.asarray(corpus.tokens[0]).size > 0


# ----------------------------------------------------------------------------------- out
def export(tok, model_type, folder, max_length=64):
    from libai.model.zoo.hf import tokenizer_files

    folder.mkdir(parents=True, exist_ok=True)
    files = tokenizer_files(tok, model_type, max_length, tok.vocab_size)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return sorted(files)


@pytest.mark.parametrize("source", ["trained", "llama3"])
def test_llama_tokenizer_files_load_in_autotokenizer(source, llama3, tmp_path):
    tok = TextTokenizer.train(LINES, "bpe", 800) if source == "trained" else \
        TextTokenizer.load(llama3)
    names = export(tok, "llama", tmp_path / "out")
    assert names == ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    config = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["model_max_length"] == 64
    hf = assert_encodes_as_hf(tok, tmp_path / "out")
    assert (hf.bos_token_id, hf.eos_token_id) == (tok.bos_id, tok.eos_id)
    assert hf.decode(tok.encode(LINES[3])) == tok.decode(tok.encode(LINES[3]))
    back = TextTokenizer.load(tmp_path / "out")
    assert back.special_tokens == tok.special_tokens and back.eod_id == tok.eod_id
    if source == "trained":  # libai's language models add no token: neither does HF
        assert hf(LINES[0])["input_ids"] == tok.encode(LINES[0])
    else:
        assert hf.eos_token == "<|eot_id|>"


def test_roberta_tokenizer_files_load_in_autotokenizer(tmp_path):
    tok = TextTokenizer.train(LINES, "bpe", 800, special_tokens=ROBERTA_SPECIALS)
    names = export(tok, "roberta", tmp_path / "out")
    assert names == ["merges.txt", "special_tokens_map.json", "tokenizer.json",
                     "tokenizer_config.json", "vocab.json"]
    hf = assert_encodes_as_hf(tok, tmp_path / "out")
    assert "Roberta" in type(hf).__name__
    got = (hf.bos_token_id, hf.pad_token_id, hf.eos_token_id, hf.unk_token_id, hf.mask_token_id)
    assert got == (0, 1, 2, 3, 4)
    a, b = tok.encode(LINES[0]), tok.encode(LINES[1])
    assert hf(LINES[0])["input_ids"] == [0, *a, 2]  # <s> A </s>, as Hugging Face frames RoBERTa
    assert hf(LINES[0], LINES[1])["input_ids"] == [0, *a, 2, 2, *b, 2]
    assert TextTokenizer.load(tmp_path / "out").special_tokens == tok.special_tokens
    # <mask> takes the space before it, as roberta-base's does (fill-mask prompts)
    words = hf("the <mask>.", add_special_tokens=False)["input_ids"]
    assert words == [*tok.encode("the"), 4, *tok.encode(".")]


def test_roberta_export_refuses_a_tokenizer_without_robertas_tokens(tmp_path):
    from libai.utils.errors import ConfigError

    with pytest.raises(ConfigError, match=r"has no sep_token, cls_token, unk_token, pad_token, mask_token: train it"):
        export(TextTokenizer.train(LINES, "bpe", 800), "roberta", tmp_path)
    with pytest.raises(ConfigError, match="exports with a bpe tokenizer"):
        export(TextTokenizer.train(LINES, "wordpiece", 800), "roberta", tmp_path)


@pytest.mark.usefixtures("run_process")  # slow: the pool spawns its worker processes
def test_tokenising_workers_end_documents_with_the_declared_token(llama3, tmp_path):
    # the worker processes rebuild the tokenizer from its file: with its declared roles too
    from libai.data.text import IndexedTokenDataset, preprocess_documents

    tok = TextTokenizer.load(llama3)
    docs = [[LINES[i], LINES[i + 1]] for i in range(0, 40, 2)]
    for workers in (1, 2):
        preprocess_documents(docs, tmp_path / f"w{workers}", tok, workers=workers,
                             append_eod=True, progress=False)
    one, two = (IndexedTokenDataset(tmp_path / f"w{w}") for w in (1, 2))
    assert len(one) == len(two) == 20 and one[0][-1] == two[0][-1] == 5  # <|eot_id|>
    assert all(np.array_equal(one[i], two[i]) for i in range(len(one)))
