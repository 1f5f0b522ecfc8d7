"""Layer-wise lr decay (paramwise_cfg.layer_decay_rate): the layers, the factors, how it composes
with the other paramwise rules, the errors and the log line."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from libai.optim import build_optim_wrapper
from libai.utils.errors import ConfigError

LR, WD = 1e-3, 0.01


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)


class Encoder(nn.Module):
    """Embeddings, ``n`` blocks, a final norm and a classifier, in that module order."""

    parallel_blocks = ("Block",)

    def __init__(self, n: int = 3) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(10, 4)
        self.blocks = nn.ModuleList(Block() for _ in range(n))
        self.final_norm = nn.LayerNorm(4)
        self.classifier = nn.Linear(4, 2)


class PlainEncoder(Encoder):
    parallel_blocks = None


def _cfg(**paramwise) -> dict:
    return dict(optimizer=dict(type="AdamW", lr=LR, weight_decay=WD), paramwise_cfg=paramwise)


def _options(model: nn.Module, cfg: dict) -> dict[str, tuple[float, float]]:
    """{parameter name: (lr, weight_decay)} of the built optimizer."""
    groups = build_optim_wrapper(model, cfg).param_groups
    by_id = {id(p): (g["lr"], g["weight_decay"]) for g in groups for p in g["params"]}
    return {n: by_id[id(p)] for n, p in model.named_parameters() if id(p) in by_id}


def test_each_layer_gets_rate_to_the_power_of_its_distance_from_the_top():
    model = Encoder(n=3)  # L = 3: embeddings layer 0, blocks 1..3, the rest layer 4
    lr_of = {n: lr for n, (lr, _) in _options(model, _cfg(layer_decay_rate=0.5)).items()}
    assert lr_of["embeddings.weight"] == pytest.approx(LR * 0.5**4)
    for k in range(3):
        for name in ("fc.weight", "fc.bias", "norm.weight", "norm.bias"):
            assert lr_of[f"blocks.{k}.{name}"] == pytest.approx(LR * 0.5 ** (3 - k)), (k, name)
    for name in ("final_norm.weight", "final_norm.bias", "classifier.weight", "classifier.bias"):
        assert lr_of[name] == LR
    groups = build_optim_wrapper(model, _cfg(layer_decay_rate=0.5)).param_groups
    assert len(groups) == 5  # one group per layer: same options are merged


def test_rate_one_changes_nothing():
    groups = build_optim_wrapper(Encoder(), _cfg(layer_decay_rate=1.0)).param_groups
    assert len(groups) == 1 and groups[0]["weight_decay"] == WD


def test_composes_with_bias_norm_and_custom_keys():
    model = Encoder(n=2)
    options = _options(model, _cfg(
        layer_decay_rate=0.5, bias_decay_mult=0.0, norm_decay_mult=0.0,
        custom_keys={"classifier": dict(lr_mult=10.0), "embeddings": dict(lr_mult=0.1)}))
    assert options["embeddings.weight"] == pytest.approx((LR * 0.1 * 0.5**3, WD))
    assert options["blocks.0.fc.weight"] == pytest.approx((LR * 0.25, WD))
    assert options["blocks.0.fc.bias"] == pytest.approx((LR * 0.25, 0.0))
    assert options["blocks.1.norm.weight"] == pytest.approx((LR * 0.5, 0.0))
    assert options["final_norm.weight"] == pytest.approx((LR, 0.0))
    assert options["classifier.weight"] == pytest.approx((LR * 10, WD))
    assert options["classifier.bias"] == pytest.approx((LR * 10, 0.0))  # bias rule still holds


def test_blocks_named_in_the_config_for_a_model_without_parallel_blocks():
    with pytest.raises(ConfigError) as info:
        build_optim_wrapper(PlainEncoder(), _cfg(layer_decay_rate=0.5))
    message = str(info.value)
    assert "layer_decay_blocks=['Block']" in message and "parallel_blocks" in message
    lr_of = _options(PlainEncoder(n=2), _cfg(layer_decay_rate=0.5, layer_decay_blocks=["Block"]))
    assert lr_of["blocks.0.fc.weight"][0] == pytest.approx(LR * 0.25)
    assert lr_of["embeddings.weight"][0] == pytest.approx(LR * 0.125)
    with pytest.raises(ConfigError, match="layer_decay_blocks: PlainEncoder has no module of "
                                          "class 'Blok'. Did you mean 'Block'"):
        build_optim_wrapper(PlainEncoder(), _cfg(layer_decay_rate=0.5, layer_decay_blocks=["Blok"]))


@pytest.mark.parametrize("paramwise, message", [
    (dict(layer_decay_rate=0), r"layer_decay_rate=0: expected a number in \(0, 1\]"),
    (dict(layer_decay_rate=1.5), "layer_decay_rate=1.5"),
    (dict(layer_decay_rate="0.65"), "layer_decay_rate='0.65'"),
    (dict(layer_decay_rate=True), "layer_decay_rate=True"),
    (dict(layer_decay_blocks=["Block"]), "layer_decay_rate is not"),
    (dict(layer_decay_rate=0.5, layer_decay_blocks="Block"), "expected a list of class names"),
    (dict(layer_decay_rate=0.5, layer_decay_blocks=[]), "expected a list of class names"),
    (dict(layer_decay_rat=0.5), "Did you mean 'layer_decay_rate'"),
])
def test_bad_values_are_config_errors(paramwise, message):
    with pytest.raises(ConfigError, match=message):
        build_optim_wrapper(Encoder(), _cfg(**paramwise))


def test_frozen_and_tied_parameters():
    class Tied(Encoder):
        def __init__(self) -> None:
            super().__init__(n=2)
            self.lm_head = nn.Linear(4, 10, bias=False)
            self.lm_head.weight = self.embeddings.weight  # first seen as the embedding

    model = Tied()
    options = _options(model, _cfg(layer_decay_rate=0.5))
    assert options["embeddings.weight"][0] == pytest.approx(LR * 0.125)
    model.embeddings.weight.requires_grad_(False)
    options = _options(model, _cfg(layer_decay_rate=0.5))
    assert "embeddings.weight" not in options and len(options) == len(
        [p for p in model.parameters() if p.requires_grad])


def test_nested_block_classes_count_once():
    class Outer(Encoder):
        parallel_blocks = ("Block", "Linear")  # a Linear inside a Block belongs to the Block

    options = _options(Outer(n=2), _cfg(layer_decay_rate=0.5))
    assert options["blocks.0.fc.weight"][0] == pytest.approx(LR * 0.5**3)  # L = 2 + classifier
    assert options["classifier.weight"][0] == pytest.approx(LR * 0.5)  # a block of its own
    assert options["final_norm.weight"][0] == LR


def test_bert_and_gpt_from_the_zoo():
    from libai.model import BertForSequenceClassification, GPTForCausalLM

    tiny = dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4,
                max_position_embeddings=64)
    bert = BertForSequenceClassification(**tiny)
    options = _options(bert, _cfg(layer_decay_rate=0.5))
    assert {n for n, (lr, _) in options.items() if lr == pytest.approx(LR * 0.125)} == {
        n for n, _ in bert.named_parameters() if n.startswith("bert.embeddings.")}
    assert options["bert.blocks.0.mlp.fc1.weight"][0] == pytest.approx(LR * 0.25)
    assert options["bert.blocks.1.attn.q_proj.bias"][0] == pytest.approx(LR * 0.5)
    for name in ("bert.pooler.dense.weight", "classifier.weight", "classifier.bias"):
        assert options[name][0] == LR
    gpt = GPTForCausalLM(**tiny)
    options = _options(gpt, _cfg(layer_decay_rate=0.5))
    assert options["transformer.embeddings.word_embeddings.weight"][0] == pytest.approx(LR / 8)
    assert options["transformer.final_norm.weight"][0] == LR


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_one_summary_line_is_logged():
    logger, handler = logging.getLogger("libai"), _Lines()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        build_optim_wrapper(Encoder(n=2), _cfg(layer_decay_rate=0.5))
        build_optim_wrapper(Encoder(n=2), _cfg(bias_decay_mult=0.0))  # no decay: no line
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert handler.lines == [
        "Layer-wise lr decay 0.5 over 2 blocks (Block): lr x 0.125 for the embeddings "
        "(embeddings); x 0.25 (block 1) to x 0.5 (block 2); x 1 for the rest (final_norm, "
        "classifier)."]


def test_works_on_a_built_model_step():
    model = Encoder(n=2)
    wrapper = build_optim_wrapper(model, _cfg(layer_decay_rate=0.5))
    loss = model.classifier(model.blocks[1].fc(model.embeddings(torch.tensor([1, 2])))).sum()
    wrapper.update_params(loss)
    assert all(torch.isfinite(p).all() for p in model.parameters())
