"""tools/generate.py: text from a GPT checkpoint, as a user runs it."""

import os
import subprocess
import sys

import pytest
import torch

from libai.checkpoint import save_checkpoint
from libai.config import Config
from libai.registry import MODELS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(*args):
    return subprocess.run([sys.executable, "tools/generate.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A small random GPT on the gpt2_tiny data (its tokenizer is built on first use)."""
    folder = tmp_path_factory.mktemp("gen")
    config = folder / "gpt.py"
    config.write_text('_base_ = "libai::gpt2_tiny.py"\n'
                      'model = dict(hidden_size=32, num_layers=1, num_heads=2)\n')
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(str(config)).model.to_dict())
    save_checkpoint({"state_dict": model.state_dict()}, folder / "gpt.pth")
    return str(config), str(folder / "gpt.pth")


def test_generate_continues_the_prompt_reproducibly(checkpoint):
    config, ckpt = checkpoint
    args = (config, ckpt, "--prompt", "ROMEO:", "--max-new-tokens", "12", "--top-k", "20",
            "--num-samples", "2", "--seed", "3")
    first, again = run(*args), run(*args)
    assert first.returncode == 0, first.stderr
    samples = first.stdout.split("--- sample ")[1:]  # a first use logs the corpus build before
    assert len(samples) == 2 and all(s.split("\n", 1)[1].startswith("ROMEO:") for s in samples)
    assert samples == again.stdout.split("--- sample ")[1:]  # same seed, same text
    greedy = run(config, ckpt, "--prompt", "ROMEO:", "--max-new-tokens", "5", "--greedy")
    assert greedy.returncode == 0 and greedy.stdout.startswith("ROMEO:"), greedy.stderr


def test_generate_bad_input_is_one_line(checkpoint, tmp_path):
    config, ckpt = checkpoint
    out = run(config, str(tmp_path / "missing.pth"))
    assert out.returncode == 2 and out.stderr.startswith("error: Checkpoint") and "\n" == out.stderr[-1]
    assert out.stderr.count("\n") == 1
    bert = run(os.path.join(ROOT, "configs", "bert_tiny.py"), ckpt)
    assert bert.returncode == 2
    assert "BertForPreTraining cannot generate text: use a GPT config" in bert.stderr


def test_config_tokenizer_and_template_of_a_fine_tuning_dataset(tmp_path):
    from libai.cli.generate import config_template, config_tokenizer
    from libai.data.text import TextTokenizer
    from libai.utils.errors import ConfigError

    path = TextTokenizer.train(["to be or not to be"] * 20, "bpe", 300).save(tmp_path)
    dataset = dict(type="InstructionDataset", data_files="x.jsonl", tokenizer=str(path))
    cfg = Config(dict(train_dataloader=dict(dataset=dataset, batch_size=1)))
    assert config_tokenizer(cfg).vocab_size == 300 and config_template(cfg) == "alpaca"
    cfg.train_dataloader.dataset.template = "chat"
    assert config_template(cfg) == "chat"
    plain = Config(dict(train_dataloader=dict(dataset=dict(type="GPTDataset"), batch_size=1)))
    with pytest.raises(ConfigError, match="name no text corpus or tokenizer; pass --tokenizer"):
        config_tokenizer(plain)
    with pytest.raises(ConfigError, match="--instruction needs a config whose data loaders read "
                                          "an InstructionDataset"):
        config_template(plain)


def test_instruction_needs_an_instruction_config(checkpoint):
    config, ckpt = checkpoint
    out = run(config, ckpt, "--instruction", "Who speaks?")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--instruction needs a config whose data loaders read an InstructionDataset" in out.stderr
    both = run(config, ckpt, "--instruction", "Who speaks?", "--prompt", "ROMEO:")
    assert both.returncode == 2 and "not both" in both.stderr
