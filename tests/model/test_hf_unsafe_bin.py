"""A Hugging Face folder whose pytorch_model.bin stores objects beside the tensors: torch.load's
weights_only refuses it (UnpicklingError). Through convert_checkpoint.py and through load_from it
is one line naming the file, why, and the conversion to safetensors; the conversion works."""

import argparse
import os

import pytest
import torch

from libai.checkpoint.weights import load_weights
from libai.model import from_hf_pretrained
from libai.utils.errors import CheckpointError

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

BERT = dict(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=24, max_position_embeddings=32)


@pytest.fixture
def unsafe_folder(tmp_path):
    torch.manual_seed(0)
    hf = transformers.BertModel(transformers.BertConfig(**BERT)).eval()
    folder = tmp_path / "hf"
    hf.save_pretrained(folder)
    os.remove(folder / "model.safetensors")
    state = dict(hf.state_dict(), training_args=argparse.Namespace(lr=1e-4))  # an object
    torch.save(state, folder / "pytorch_model.bin")
    return folder, hf


def test_convert_checkpoint_says_what_the_file_is_and_what_to_do(unsafe_folder, tmp_path,
                                                                 run_tool):
    folder, _ = unsafe_folder
    out = run_tool("tools/convert_checkpoint.py", "hf2libai", folder, tmp_path / "out.pth")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    line = lines[0]
    assert line.startswith(f"error: {folder / 'pytorch_model.bin'} is a pickle that "
                           f"torch.load(weights_only=True) refuses (it stores an object of class "
                           f"argparse.Namespace)")
    assert "has no option to trust one" in line and "model.safetensors" in line
    assert not (tmp_path / "out.pth").exists()


def test_load_from_says_the_same_and_the_suggested_conversion_works(unsafe_folder, run_tool):
    folder, hf = unsafe_folder
    model = from_hf_pretrained(_safe_copy(hf, folder.parent / "safe"))
    with pytest.raises(CheckpointError, match=r"pytorch_model.bin is a pickle that torch.load"
                                              r"\(weights_only=True\) refuses") as info:
        load_weights(model, str(folder))
    command = str(info.value).split('python -c "')[1].split('"')[0]
    script = folder.parent / "suggested.py"  # `python -c COMMAND`, run as a script here
    script.write_text(command)
    run_tool(script).check()
    assert (folder / "model.safetensors").is_file()
    for p in model.parameters():
        torch.nn.init.zeros_(p)
    load_weights(model, str(folder))  # model.safetensors is read first
    assert any(p.abs().sum() > 0 for p in model.parameters())


def _safe_copy(hf, folder):
    hf.save_pretrained(folder)
    return str(folder)
