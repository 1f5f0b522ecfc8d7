"""One record per model family (libai/model/zoo/family.py): each family registers once, the
Hugging Face code reaches it through its record and names no family, a new family is a model
and an adapter and nothing else, and the causal LMs share one copy of what they have in common.
CPU only, in-process."""

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

import libai
from libai.model import (
    GPTForCausalLM,
    LlamaForCausalLM,
    ModelConfig,
    ModelFamily,
    families,
    from_hf_pretrained,
    save_hf_pretrained,
)
from libai.model.zoo import family as family_module
from libai.model.zoo import hf
from libai.model.zoo.causal_lm import CausalLM
from libai.model.zoo.config import config_signature
from libai.model.zoo.hf_base import HFAdapter
from libai.registry import MODELS
from libai.utils.errors import CheckpointError

ROOT = Path(libai.__file__).resolve().parent.parent


def test_every_family_is_one_record_that_its_classes_point_to():
    names = [f.name for f in families()]
    assert names == ["bert", "gpt2", "llama", "roberta"]
    for fam in families():
        assert fam.classes and fam.main in {c.__name__ for c in fam.classes}
        for cls in fam.classes:
            assert cls.hf_model_type == fam.name and cls.parallel_blocks == fam.blocks
            assert MODELS.get(cls.__name__) is cls
        assert set(fam.shape_args) <= set(fam.config.names())
        assert isinstance(hf.adapter(fam), HFAdapter)
        assert any("pipeline_last" in parts for parts in fam.parts().values())


def test_the_hugging_face_code_names_no_family():
    """No string-keyed table of families is left: a family's name stands in its own files."""
    names = {f.name for f in families()} | {c.__name__ for f in families() for c in f.classes}
    for path in ("libai/model/zoo/hf.py", "libai/model/zoo/hf_base.py",
                 "libai/model/zoo/family.py", "libai/cli/convert_checkpoint.py"):
        found = {n.value for n in ast.walk(ast.parse((ROOT / path).read_text()))
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and n.value in names}
        assert not found, f"{path} names families: {sorted(found)}"


def test_the_causal_lms_share_one_copy():
    for name in ("generate", "pipeline_last", "count_items", "logits", "new_kv_caches", "forward"):
        assert getattr(GPTForCausalLM, name) is getattr(LlamaForCausalLM, name) \
            is getattr(CausalLM, name), name


# ----------------------------------------------------------------------------- a new family
@dataclass(frozen=True)
class ToyConfig(ModelConfig):
    vocab_size: int = 13
    hidden_size: int = 8
    num_layers: int = 2


class ToyBlock(nn.Module):
    def __init__(self, c: ToyConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(c.hidden_size, c.hidden_size)

    def forward(self, h, **kwargs):
        return h + torch.tanh(self.fc(h))


class ToyStack(nn.Module):
    def __init__(self, c: ToyConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(c.vocab_size, c.hidden_size)
        self.blocks = nn.ModuleList(ToyBlock(c) for _ in range(c.num_layers))
        self.final_norm = nn.LayerNorm(c.hidden_size)

    def forward(self, input_ids, kv_caches=None, attention_mask=None, position_ids=None):
        h = self.embed(input_ids)
        for block in self.blocks:
            h = block(h)
        return self.final_norm(h)


class ToyAdapter(HFAdapter):
    """Hugging Face names are libai's under ``toy.``; the config keeps libai's field names."""

    def from_hf(self, config, state, target):
        kwargs = {k: config[k] for k in ToyConfig.names()}
        return {"type": "ToyForCausalLM", **kwargs}, {k.removeprefix("toy."): v
                                                      for k, v in state.items()}

    def to_hf(self, model, a, state):
        out = {f"toy.{k}": state.pop(k) for k in list(state)}
        return {"model_type": "toy", "architectures": ["ToyForCausalLM"], **a.to_dict()}, out


def _toy_family():
    toy = ModelFamily("toy", "Toy", config=ToyConfig, main="ToyForCausalLM",
                      blocks=("ToyBlock",), shape_args=("vocab_size", "hidden_size", "num_layers"),
                      adapter=f"{__name__}.ToyAdapter")

    @toy.register
    class ToyForCausalLM(CausalLM, nn.Module):
        __signature__ = config_signature(ToyConfig)

        def __init__(self, config=None, **kwargs):
            c = ToyConfig.resolve(config, kwargs, type(self).__name__)
            super().__init__()
            self.config, self.vocab_size = c, c.vocab_size
            self.transformer = ToyStack(c)
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)

        def head_logits(self, h):
            return self.lm_head(h)

        def pipeline_first(self, batch):
            return self.transformer.embed(batch["input_ids"])

        def pipeline_block_kwargs(self, h, batch):
            return {}

    return toy, ToyForCausalLM


@pytest.fixture
def scratch_registries(monkeypatch):
    """The toy family's registrations vanish after the test."""
    monkeypatch.setattr(family_module, "_FAMILIES", dict(family_module._FAMILIES))
    monkeypatch.setattr(MODELS, "_module_dict", dict(MODELS._module_dict))
    monkeypatch.setattr(hf, "_ADAPTERS", {})


def test_a_new_family_is_a_model_and_an_adapter(scratch_registries, tmp_path):
    toy, ToyForCausalLM = _toy_family()
    torch.manual_seed(0)
    model = ToyForCausalLM(num_layers=3)
    assert model.hf_model_type == "toy" and model.parallel_blocks == ("ToyBlock",)
    assert toy.parts()["ToyForCausalLM"][-2:] == ("pipeline_last", "count_items")
    batch = {"input_ids": torch.tensor([[1, 2, 3, 4]]), "labels": torch.tensor([[2, 3, 4, -100]])}
    assert model.count_items(batch) == {"loss": 3}
    model.train()
    assert model(batch)["loss"].ndim == 0  # CausalLM's forward and pipeline_last

    save_hf_pretrained(model, tmp_path / "hf")  # through the family's record and adapter
    back = from_hf_pretrained(tmp_path / "hf")
    assert type(back) is ToyForCausalLM and back.config == model.config
    ids = batch["input_ids"]
    torch.testing.assert_close(back.logits(ids), model.logits(ids), rtol=0, atol=0)
    assert "Toy" in str(pytest.raises(CheckpointError, hf.check_hf_export, nn.Linear(1, 1)).value)
    other = ToyForCausalLM(num_layers=2)
    with pytest.raises(CheckpointError, match="num_layers=3"):
        hf.hf_state_dict_for(other, tmp_path / "hf")  # the record's shape_args are checked
    with pytest.raises(ValueError, match="registered twice"):
        _toy_family()
