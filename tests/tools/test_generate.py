"""tools/generate.py: text from a GPT checkpoint, as a user runs it: in this process (run_tool:
the same main(argv)), and once as a process of its own (a prompt of bytes that are not UTF-8: only
a real command line has them)."""

import os

import pytest
import torch

from libai.checkpoint import save_checkpoint
from libai.config import Config
from libai.registry import MODELS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def run(run_tool):
    """``run(*args)``: tools/generate.py in this process."""
    return lambda *args: run_tool("tools/generate.py", *args)


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


def test_generate_continues_the_prompt_reproducibly(run, checkpoint):
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


def test_generate_bad_input_is_one_line(run, checkpoint, tmp_path):
    config, ckpt = checkpoint
    out = run(config, str(tmp_path / "missing.pth"))
    assert out.returncode == 2 and out.stderr.startswith("error: Checkpoint") and "\n" == out.stderr[-1]
    assert out.stderr.count("\n") == 1
    bert = run(os.path.join(ROOT, "configs", "bert_tiny.py"), ckpt)
    assert bert.returncode == 2
    assert "BertForPreTraining cannot generate text: use a causal LM config" in bert.stderr


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


def test_instruction_needs_an_instruction_config(run, checkpoint):
    config, ckpt = checkpoint
    out = run(config, ckpt, "--instruction", "Who speaks?")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--instruction needs a config whose data loaders read an InstructionDataset" in out.stderr
    both = run(config, ckpt, "--instruction", "Who speaks?", "--prompt", "ROMEO:")
    assert both.returncode == 2 and "not both" in both.stderr


def cli(capsys, *args):
    """``libai generate ARGS`` in this process: (exit status, stdout, stderr)."""
    from libai.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["generate", *args])
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def outputs(stdout):
    """The texts after each ``--- prompt i`` header, in order."""
    return [block.split("\n", 1)[1][:-1] for block in stdout.split("--- prompt ")[1:]]


PROMPTS = ["ROMEO:", "JULIET: O Romeo, Romeo", "To be, or not"]


def test_a_prompt_file_is_one_padded_batch_each_as_alone(checkpoint, tmp_path, capsys):
    from libai.cli.generate import config_tokenizer

    config, ckpt = checkpoint
    tokenizer = config_tokenizer(Config.fromfile(config))
    assert len({len(tokenizer.encode(p)) for p in PROMPTS}) == 3  # the batch needs padding
    path = tmp_path / "prompts.txt"
    path.write_text(f"{PROMPTS[0]}\n\n  \n{PROMPTS[1]}\r\n{PROMPTS[2]}\n", encoding="utf-8")
    status, out, err = cli(capsys, config, ckpt, "--prompt-file", str(path), "--greedy",
                           "--max-new-tokens", "6")
    assert status == 0, err
    batched = outputs(out)
    assert len(batched) == 3 and "--- prompt 3\n" in out
    for prompt, text in zip(PROMPTS, batched):
        status, alone, err = cli(capsys, config, ckpt, "--prompt", prompt, "--greedy",
                                 "--max-new-tokens", "6")
        assert status == 0 and text.startswith(prompt) and alone == text + "\n", err
    status, zero, _ = cli(capsys, config, ckpt, "--prompt-file", str(path), "--temperature",
                          "0", "--max-new-tokens", "6")  # temperature 0 is greedy
    assert status == 0 and outputs(zero) == batched
    status, two, _ = cli(capsys, config, ckpt, "--prompt-file", str(path), "--num-samples", "2",
                         "--max-new-tokens", "4", "--seed", "1")
    assert status == 0 and two.count("--- prompt ") == 6 and "--- prompt 3, sample 2\n" in two


def test_stop_strings_cut_the_continuation(checkpoint, capsys):
    config, ckpt = checkpoint
    args = (config, ckpt, "--prompt", "ROMEO:", "--greedy", "--max-new-tokens", "12")
    status, full, err = cli(capsys, *args)
    assert status == 0, err
    text = full[:-1]
    assert len(text) > len("ROMEO:") + 4, text
    stop = text[len("ROMEO:") + 2: len("ROMEO:") + 4]
    cut = text[: text.index(stop, len("ROMEO:"))]
    status, out, err = cli(capsys, *args, "--stop", "never there", "--stop", stop)
    assert status == 0 and out == cut + "\n", err
    status, out, _ = cli(capsys, *args, "--stop", "ROMEO")  # only the continuation is searched
    assert out == full


@pytest.mark.parametrize("flags, says", [
    (("--temperature", "nan"), "--temperature must be a finite number >= 0"),
    (("--temperature", "inf"), "--temperature must be a finite number >= 0"),
    (("--temperature", "-0.5"), "--temperature must be a finite number >= 0 (0 always takes"),
    (("--top-k", "0"), "--top-k must be at least 1, got 0"),
    (("--top-p", "-0.1"), "--top-p is a total probability in (0, 1], got -0.1"),
    (("--prompt-file", "$T/nope.txt"), "--prompt-file $T/nope.txt: no such file"),
    (("--prompt-file", "$T/bad.txt"), "--prompt-file $T/bad.txt line 3 is not UTF-8 text (byte "
                                      "0xff at column 4)"),
    (("--prompt-file", "$T/blank.txt"), "--prompt-file $T/blank.txt has no prompts"),
    (("--prompt", "A", "--prompt-file", "$T/bad.txt"), "not both --prompt and --prompt-file"),
    (("--prompt", "caf\udce9"), "--prompt is not UTF-8 text (byte 0xe9 at character 4)"),
    (("--stop", "\udcff"), "--stop is not UTF-8 text"),
])
def test_bad_generation_options_are_one_line_before_the_model(flags, says, tmp_path, capsys):
    (tmp_path / "bad.txt").write_bytes(b"ok\n\nab \xff\xfe\n")
    (tmp_path / "blank.txt").write_text("\n  \n")
    flags = [f.replace("$T", str(tmp_path)) for f in flags]
    # the checkpoint does not exist: an error about it would mean the options came too late
    status, _, err = cli(capsys, "gpt2_tiny", str(tmp_path / "none.pth"), *flags)
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: ") and says.replace("$T", str(tmp_path)) in err, err


def test_a_prompt_that_is_not_utf8_on_the_command_line(run_process):
    # os.fsdecode: the str that the subprocess module turns back into the bytes caf\xe9
    out = run_process("tools/generate.py", "gpt2_tiny", "none.pth", "--prompt",
                      os.fsdecode(b"caf\xe9"))
    err = out.stderr
    assert out.returncode == 2 and err.count("\n") == 1, err
    assert "error: --prompt is not UTF-8 text (byte 0xe9 at character 4)" in err
