"""tools/convert_checkpoint.py both ways, as a user runs it: in this process (run_tool: the same
main(argv)), and once as a process of its own (test_bad_input_is_one_line)."""

import json

import pytest
import torch

from libai.checkpoint import load_checkpoint
from libai.registry import MODELS

transformers = pytest.importorskip("transformers")



TOOL = "tools/convert_checkpoint.py"


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_hf_to_libai_and_back(run_tool, tmp_path, kind):
    torch.manual_seed(0)
    if kind == "bert":
        hf = transformers.BertForPreTraining(transformers.BertConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64)).eval()
    else:
        hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
            eos_token_id=0)).eval()
    hf.save_pretrained(tmp_path / "hf")
    out = run_tool(TOOL, "hf2libai", tmp_path / "hf", tmp_path / "w.pth").check()
    text = out.stdout.split("put this model in your config:\n", 1)[1]
    scope = {}
    exec(text, scope)  # the printed snippet is a valid config fragment
    expected_type = "BertForPreTraining" if kind == "bert" else "GPTForCausalLM"
    assert scope["model"]["type"] == expected_type and scope["model"]["num_layers"] == 2

    model = MODELS.build(scope["model"]).eval()
    model.load_state_dict(load_checkpoint(tmp_path / "w.pth")["state_dict"], strict=True)
    ids = torch.randint(1, 99, (2, 9))
    with torch.no_grad():
        if kind == "bert":
            ours, expected = model.logits(ids)[0], hf(input_ids=ids).prediction_logits
        else:
            ours, expected = model.logits(ids), hf(ids).logits
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)

    (tmp_path / "cfg.py").write_text(text)
    out = run_tool(TOOL, "libai2hf", tmp_path / "cfg.py", tmp_path / "w.pth", tmp_path / "back")
    out.check()
    assert "config.json" in out.stdout and "no tokenizer written" in out.stdout  # none named
    assert json.loads((tmp_path / "back" / "config.json").read_text())["model_type"] == kind
    back = type(hf).from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        again = back(input_ids=ids)
    again = again.prediction_logits if kind == "bert" else again.logits
    torch.testing.assert_close(again, expected, atol=1e-5, rtol=0)


def test_bad_input_is_one_line(run_process, run_tool, tmp_path):
    # the script's own process once: a one-line error and exit status 2 from the interpreter
    out = run_process(TOOL, "hf2libai", tmp_path / "missing", tmp_path / "w.pth")
    assert out.returncode == 2 and out.stderr.startswith("error: ")
    assert "is not a Hugging Face model folder" in out.stderr and out.stderr.count("\n") == 1
    transformers.DistilBertForMaskedLM(transformers.DistilBertConfig(
        vocab_size=99, dim=32, n_layers=1, n_heads=4, hidden_dim=37)).save_pretrained(
        tmp_path / "distilbert")
    out = run_tool(TOOL, "hf2libai", tmp_path / "distilbert", tmp_path / "w.pth")
    assert out.returncode == 2 and "model_type 'distilbert'" in out.stderr
    assert out.stderr.count("\n") == 1 and not (tmp_path / "w.pth").exists()
    (tmp_path / "cfg.py").write_text("model = dict(type='DigitsMLP')\n")
    out = run_tool(TOOL, "libai2hf", tmp_path / "cfg.py", tmp_path / "nope.pth", tmp_path / "o")
    assert out.returncode == 2 and out.stderr.startswith("error: ")


def test_libai2hf_of_a_model_without_a_hugging_face_equivalent_is_one_line(run_tool, tmp_path):
    """configs/digits_mlp.py: one line naming the families that export (it was an
    AttributeError: 'DigitsMLP' object has no attribute 'config'), and nothing written."""
    model = MODELS.build(dict(type="DigitsMLP", in_features=64, hidden=256, num_classes=10))
    torch.save({"state_dict": model.state_dict()}, tmp_path / "digits.pth")
    out = run_tool(TOOL, "libai2hf", "configs/digits_mlp.py", tmp_path / "digits.pth",
                   tmp_path / "hf")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("error: DigitsMLP has no Hugging Face equivalent")
    assert "BERT, GPT-2, Llama and RoBERTa" in out.stderr
    assert not (tmp_path / "hf").exists()


def test_libai2hf_writes_the_weights_alone_when_the_configs_tokenizer_does_not_fit(run_tool,
                                                                                  tmp_path):
    """A model imported from Hugging Face without tokenizer files (vocabulary 99) under a config
    whose dataset names a tokenizer of another size: the weights are written, and a line says
    why the tokenizer was left out; --no-tokenizer leaves it out on purpose; a --tokenizer that
    does not fit is an error (the user asked for it)."""
    from libai.data.text import TextTokenizer

    transformers.BertForPreTraining(transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=64)).save_pretrained(tmp_path / "hf")
    out = run_tool(TOOL, "hf2libai", tmp_path / "hf", tmp_path / "w.pth").check()
    tok = TextTokenizer.train(["to be or not to be that is the question"] * 20, "wordpiece", 200)
    tok.save(tmp_path / "tokenizer.json")
    size = tok.backend.get_vocab_size(with_added_tokens=True)
    assert size > 99
    (tmp_path / "cfg.py").write_text(
        out.stdout.split("put this model in your config:\n", 1)[1]
        + f"train_dataloader = dict(dataset=dict(type='LabeledTextDataset', data_files='x.csv', "
          f"tokenizer={str(tmp_path / 'tokenizer.json')!r}))\n")

    weights_only = ["config.json", "model.safetensors"]
    out = run_tool(TOOL, "libai2hf", tmp_path / "cfg.py", tmp_path / "w.pth", tmp_path / "a")
    out.check()
    assert (f"no tokenizer written: the config's dataset's does not fit the model (the tokenizer "
            f"has {size} tokens but the model 99") in out.stdout, out.stdout
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == weights_only
    assert transformers.BertForPreTraining.from_pretrained(tmp_path / "a").config.vocab_size == 99

    out = run_tool(TOOL, "libai2hf", tmp_path / "cfg.py", tmp_path / "w.pth", tmp_path / "b",
                   "--no-tokenizer").check()
    assert "no tokenizer written (--no-tokenizer)" in out.stdout
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == weights_only

    out = run_tool(TOOL, "libai2hf", tmp_path / "cfg.py", tmp_path / "w.pth", tmp_path / "c",
                   "--tokenizer", tmp_path / "tokenizer.json")
    assert out.returncode == 2 and f"the tokenizer has {size} tokens" in out.stderr
    assert not (tmp_path / "c").exists()
