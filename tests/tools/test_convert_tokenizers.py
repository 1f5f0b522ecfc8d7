"""``convert_checkpoint.py libai2hf`` writes the tokenizer a Llama or RoBERTa config names, so that
``AutoTokenizer`` loads the folder it writes and encodes as libai does."""

import json
import os

import pytest
import torch

from libai.checkpoint import save_checkpoint
from libai.config import Config
from libai.data.text import TextTokenizer
from libai.registry import MODELS

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXT = ["To be, or not to be, that is the question:", "Whether 'tis nobler in the mind to suffer",
        "The slings and arrows of outrageous fortune,", "Or to take arms against a sea of troubles"]
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
LLAMA = dict(type="LlamaForCausalLM", vocab_size=320, hidden_size=32, num_layers=1, num_heads=4,
             num_kv_heads=2, ffn_hidden_size=48, max_position_embeddings=64, rope_theta=10000.0,
             rope_scaling=None)
ROBERTA = dict(type="RobertaForMaskedLM", vocab_size=320, hidden_size=32, num_layers=1,
               num_heads=4, ffn_hidden_size=48, max_position_embeddings=66)


@pytest.fixture
def convert(run_tool):
    """tools/convert_checkpoint.py in this process (its own process: test_convert_checkpoint.py)."""
    return lambda *args: run_tool("tools/convert_checkpoint.py", *args)


def llama3_tokenizer(folder):
    """A Llama-3 style tokenizer folder, as transformers saves one (its eos: <|eot_id|>)."""
    tk = tokenizers
    backend = tk.Tokenizer(tk.models.BPE())
    backend.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tk.decoders.ByteLevel()
    backend.train_from_iterator(TEXT * 20, tk.trainers.BpeTrainer(
        vocab_size=300, show_progress=False, initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]))
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
    ).save_pretrained(folder)
    return folder


def write_config_and_checkpoint(tmp_path, model, dataset):
    cfg = tmp_path / "cfg.py"
    cfg.write_text(f"model = {model!r}\ntrain_dataloader = dict(dataset={dataset!r})\n")
    torch.manual_seed(0)
    built = MODELS.build(Config.fromfile(str(cfg)).model.to_dict())
    save_checkpoint({"state_dict": built.state_dict()}, tmp_path / "w.pth")
    return cfg, built


def test_llama_export_writes_the_corpus_tokenizer(convert, tmp_path):
    pytest.importorskip("libai.model.zoo.llama")  # the Llama model (and its registration)
    folder = llama3_tokenizer(tmp_path / "tok")
    (tmp_path / "docs.txt").write_text("\n\n".join(TEXT) + "\n")
    corpus = dict(source=str(tmp_path / "docs.txt"), tokenizer=str(folder),
                  cache_dir=str(tmp_path / "cache"))
    cfg, _ = write_config_and_checkpoint(
        tmp_path, LLAMA, dict(type="GPTDataset", corpus=corpus, seq_length=16))
    out = convert("libai2hf", cfg, tmp_path / "w.pth", tmp_path / "hf")
    assert out.returncode == 0, out.stderr
    tok = TextTokenizer.load(folder)
    assert f"tokenizer: the config's (bpe, {tok.vocab_size} tokens)" in out.stdout
    hf_dir = tmp_path / "hf"
    config = json.loads((hf_dir / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, 2)  # <|eot_id|>, declared
    hf_tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert [hf_tok(t, add_special_tokens=False)["input_ids"] for t in TEXT] == \
        tok.encode_batch(TEXT)
    assert (hf_tok.bos_token_id, hf_tok.eos_token_id) == (0, 2)
    assert json.loads((hf_dir / "tokenizer_config.json").read_text())["model_max_length"] == 64
    model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir)
    assert model.config.eos_token_id == 2


def test_roberta_export_with_tokenizer_option(convert, tmp_path):
    tok = TextTokenizer.train(TEXT * 20, "bpe", 320, special_tokens=ROBERTA_SPECIALS)
    tok.save(tmp_path / "tok")
    cfg, _ = write_config_and_checkpoint(tmp_path, ROBERTA, dict(type="Unknown"))
    out = convert("libai2hf", cfg, tmp_path / "w.pth", tmp_path / "hf",
                  "--tokenizer", tmp_path / "tok")
    assert out.returncode == 0, out.stderr
    hf_dir = tmp_path / "hf"
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
            "merges.txt"} <= set(os.listdir(hf_dir))
    config = json.loads((hf_dir / "config.json").read_text())
    assert (config["bos_token_id"], config["pad_token_id"], config["eos_token_id"]) == (0, 1, 2)
    hf_tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert hf_tok(TEXT[0])["input_ids"] == [0, *tok.encode(TEXT[0]), 2]
    assert hf_tok.model_max_length == 64  # 66 positions, counted from pad_token_id + 1 = 2
    model = transformers.AutoModelForMaskedLM.from_pretrained(hf_dir)
    assert type(model).__name__ == "RobertaForMaskedLM"


def test_export_without_a_tokenizer_says_so_and_writes_the_weights(convert, tmp_path):
    cfg, _ = write_config_and_checkpoint(tmp_path, ROBERTA, dict(type="Unknown"))
    out = convert("libai2hf", cfg, tmp_path / "w.pth", tmp_path / "hf")
    assert out.returncode == 0, out.stderr
    notes = [line for line in out.stdout.splitlines() if "no tokenizer written" in line]
    assert len(notes) == 1 and "--tokenizer PATH" in notes[0]
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors"]
