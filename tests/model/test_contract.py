"""The model contract is the whole list: the engine reads no model attribute that
libai.model.contract does not name, each listed reader really reads its field, the zoo's models
declare valid fields, and docs/models.md shows the table the contract describes."""

import ast
import inspect
import re
from pathlib import Path

import pytest
from torch import nn

import libai
from libai.model import (
    CONTRACT,
    BertForPreTraining,
    BertForSequenceClassification,
    BertModel,
    DigitsMLP,
    GPTForCausalLM,
    GPTModel,
    check_model,
)
from libai.model.contract import KINDS, describe, field

ROOT = Path(libai.__file__).resolve().parent.parent
# the models themselves: what they read of their own parts is not the engine's business
MODEL_CODE = ("libai/model/zoo/", "libai/model/layers/")
# receivers that hold the model (or its DDP / compiled / graph-mode wrapper)
MODEL_RECEIVER = re.compile(r"^((self|runner)\.)?(unwrapped_)?model$")
# what the engine reads of the wrappers around a model, not of the model
WRAPPER_ATTRIBUTES = {
    "module": "DistributedDataParallel",
    "no_sync": "DistributedDataParallel",
    "_orig_mod": "torch.compile",
    "train_calls": "GraphModule (graph mode)",
    "report": "GraphModule (graph mode)",
    "describe_step": "PipelineModule (parallel.pipeline)",
    "stages": "PipelineModule (parallel.pipeline): the model summary names this process's",
}
TINY = dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64)


def _engine_files() -> list[Path]:
    files = sorted((ROOT / "libai").rglob("*.py"))
    return [p for p in files if not p.relative_to(ROOT).as_posix().startswith(MODEL_CODE)]


def _model_reads(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every ``model.name``, ``getattr(model, "name")`` and
    ``hasattr(model, "name")`` in ``path``."""
    reads = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and MODEL_RECEIVER.match(ast.unparse(node.args[0]))):
            reads.append((node.lineno, node.args[1].value))
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
              and MODEL_RECEIVER.match(ast.unparse(node.value))):
            reads.append((node.lineno, node.attr))
    return reads


def test_the_engine_reads_no_model_attribute_the_contract_does_not_list():
    torch_api = set(dir(nn.Module())) | set(dir(nn.Module))
    listed = {f.name for f in CONTRACT}
    unlisted = [f"{path.relative_to(ROOT)}:{line}: model.{name}"
                for path in _engine_files() for line, name in _model_reads(path)
                if name not in listed | torch_api | set(WRAPPER_ATTRIBUTES)]
    assert not unlisted, ("the engine reads model attributes that libai/model/contract.py does "
                          "not list (add a ContractField, or say why it is not the model's):\n"
                          + "\n".join(unlisted))


def test_the_scan_sees_the_reads_it_must_see():
    reads = {name for path in _engine_files() for _, name in _model_reads(path)}
    assert {"vocab_size", "max_position_embeddings", "parallel_blocks", "train_step",
            "val_step"} <= reads


def _names_in_code(path: Path) -> set[str]:
    """Every ``x.name`` and every string constant of ``path`` (a docstring is one long string,
    so a mention in prose does not count)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def test_every_field_is_read_where_the_contract_says():
    for f in CONTRACT:
        assert f.kind in KINDS and f.read_by, f
        for reader in f.read_by:
            path = ROOT / reader
            assert path.is_file(), f"{f.name}: reader {reader} does not exist"
            if f.kind == "call":  # model(batch): the readers call what they name `forward`
                assert re.search(r"\bforward\(", path.read_text()), reader
                continue
            assert f.name in _names_in_code(path), (
                f"contract says {reader} reads {f.name!r}, but its code does not")
    assert [f.name for f in CONTRACT if f.required] == ["forward"]  # any nn.Module trains
    assert field("tp_plan").kind == "submodule attribute"
    with pytest.raises(KeyError):
        field("no_such_field")


@pytest.mark.parametrize("build", [
    lambda: BertModel(**TINY), lambda: BertForPreTraining(**TINY),
    lambda: BertForPreTraining(**TINY, second_head=None),
    lambda: BertForSequenceClassification(**TINY), lambda: GPTModel(**TINY),
    lambda: GPTForCausalLM(**TINY), lambda: DigitsMLP()])
def test_zoo_models_declare_valid_fields(build):
    model = build()
    assert check_model(model) == []
    if hasattr(model, "hf_model_type"):  # a config rebuilds the same model
        from libai.registry import MODELS

        again = MODELS.build(dict(type=type(model).__name__, **model.config))
        assert again.config == model.config
        assert [k for k in again.state_dict()] == [k for k in model.state_dict()]


def test_check_model_names_what_is_wrong():
    class Bad(nn.Module):
        vocab_size = "many"
        parallel_blocks = ("Block",)
        hf_model_type = "bert"

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.lin.tp_plan = {"weight": "diagonal"}

    problems = check_model(Bad())
    assert any("vocab_size='many'" in p for p in problems)
    assert any("'Block', which no submodule is" in p for p in problems)
    assert any("diagonal" in p for p in problems)
    assert any("needs a `config`" in p for p in problems)
    assert check_model(nn.Linear(2, 2)) == []  # nothing declared, nothing wrong


def test_docs_show_the_contract_table():
    assert describe() in (ROOT / "docs" / "models.md").read_text()


def test_step_names_import_from_libai_model():
    import libai.model
    from libai.model import steps

    for name in ("BaseModel", "make_train_step", "parse_losses", "to_device", "unwrap_model",
                 "train_step", "val_step", "test_step", "DataPreprocessor"):
        assert getattr(libai.model, name) is getattr(steps, name)


def test_config_classes_spell_out_their_arguments_for_the_registry():
    sig = inspect.signature(BertModel)
    assert list(sig.parameters)[:3] == ["config", "vocab_size", "hidden_size"]
    assert "add_pooler" in sig.parameters and "second_head" not in sig.parameters
    assert "second_head" in inspect.signature(BertForPreTraining).parameters
    assert sig.parameters["pad_token_id"].annotation == "int | None"

    class MyGPT(GPTForCausalLM):  # a subclass keeps its own signature
        def __init__(self, extra: int = 1, **kwargs):
            super().__init__(**kwargs)

    assert list(inspect.signature(MyGPT).parameters) == ["extra", "kwargs"]
    assert str(inspect.signature(GPTForCausalLM(**TINY))) == "(*args, **kwargs)"  # the call
