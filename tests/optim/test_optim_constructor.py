"""Optimizer registration, build_optim_wrapper and paramwise_cfg."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libai.optim import TORCH_OPTIMIZERS, OptimWrapper, build_optim_wrapper
from libai.registry import OPTIM_WRAPPER_CONSTRUCTORS, OPTIM_WRAPPERS, OPTIMIZERS
from libai.utils.errors import ConfigError, RegistryError


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8), nn.LayerNorm(8)
        )
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


def _names(model: nn.Module, group: dict) -> set[str]:
    ids = {id(p) for p in group["params"]}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def _cfg(**paramwise) -> dict:
    cfg = dict(type="OptimWrapper", optimizer=dict(type="AdamW", lr=1e-3, weight_decay=0.01))
    if paramwise:
        cfg["paramwise_cfg"] = paramwise
    return cfg


def test_every_torch_optimizer_is_registered():
    for name in ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "LBFGS"):
        assert OPTIMIZERS.get(name) is getattr(torch.optim, name)
        assert name in TORCH_OPTIMIZERS
    assert "Optimizer" not in TORCH_OPTIMIZERS
    assert OPTIM_WRAPPERS.get("OptimWrapper") is OptimWrapper
    assert "AmpOptimWrapper" in OPTIM_WRAPPERS
    assert "DefaultOptimWrapperConstructor" in OPTIM_WRAPPER_CONSTRUCTORS


def test_plain_build_one_group_and_cfg_untouched():
    model = Net()
    cfg = _cfg()
    cfg["clip_grad"] = dict(type="norm", max_norm=1.0)
    cfg["accumulative_counts"] = 2
    before = repr(cfg)
    wrapper = build_optim_wrapper(model, cfg)
    assert repr(cfg) == before
    assert isinstance(wrapper.optimizer, torch.optim.AdamW)
    assert wrapper.accumulative_counts == 2
    assert len(wrapper.param_groups) == 1
    assert wrapper.get_lr() == {"lr": [1e-3]}


def test_paramwise_multipliers_and_merged_groups():
    model = Net()
    cfg = _cfg(
        bias_decay_mult=0.0,
        norm_decay_mult=0.0,
        bias_lr_mult=1.0,
        custom_keys={"head": dict(lr_mult=10, decay_mult=0)},
    )
    groups = build_optim_wrapper(model, cfg).param_groups
    assert len(groups) == 3  # default, no-decay (biases + norms merged), head
    by_names = {frozenset(_names(model, g)): g for g in groups}
    default = by_names[frozenset({"backbone.0.weight", "backbone.3.weight"})]
    assert (default["lr"], default["weight_decay"]) == (1e-3, 0.01)
    no_decay = by_names[
        frozenset(
            {
                "backbone.0.bias",
                "backbone.3.bias",
                "backbone.1.weight",
                "backbone.1.bias",
                "backbone.4.weight",
                "backbone.4.bias",
            }
        )
    ]
    assert (no_decay["lr"], no_decay["weight_decay"]) == (1e-3, 0.0)
    head = by_names[frozenset({"head.weight", "head.bias"})]
    assert head["lr"] == pytest.approx(1e-2) and head["weight_decay"] == 0.0


def test_bias_lr_mult_and_longest_custom_key_wins():
    model = Net()
    cfg = _cfg(
        bias_lr_mult=2.0,
        custom_keys={"head": dict(lr_mult=10.0), "head.bias": dict(lr_mult=3.0)},
    )
    groups = build_optim_wrapper(model, cfg).param_groups
    lr_of = {n: g["lr"] for g in groups for n in _names(model, g)}
    assert lr_of["head.bias"] == pytest.approx(3e-3)
    assert lr_of["head.weight"] == pytest.approx(1e-2)
    assert lr_of["backbone.0.bias"] == pytest.approx(2e-3)
    assert lr_of["backbone.1.bias"] == pytest.approx(2e-3)  # a norm layer's bias is a bias
    assert lr_of["backbone.0.weight"] == pytest.approx(1e-3)
    assert len(groups) == 4


def test_decay_mult_uses_optimizer_default_weight_decay():
    model = Net()
    cfg = dict(optimizer=dict(type="AdamW", lr=1e-3), paramwise_cfg=dict(norm_decay_mult=0.5))
    groups = build_optim_wrapper(model, cfg).param_groups
    default_wd = torch.optim.AdamW([nn.Parameter(torch.zeros(1))]).defaults["weight_decay"]
    assert sorted(g["weight_decay"] for g in groups) == pytest.approx(
        [default_wd * 0.5, default_wd]
    )


def test_frozen_parameters_are_excluded():
    model = Net()
    model.backbone[0].weight.requires_grad_(False)
    for cfg in (_cfg(), _cfg(bias_decay_mult=0.0)):
        wrapper = build_optim_wrapper(model, cfg)
        params = [p for g in wrapper.param_groups for p in g["params"]]
        assert all(p.requires_grad for p in params)
        assert len(params) == len(list(model.parameters())) - 1
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ConfigError, match="no trainable parameters"):
        build_optim_wrapper(model, _cfg())


def test_unknown_custom_key_names_it_and_close_names():
    with pytest.raises(ConfigError) as info:
        build_optim_wrapper(Net(), _cfg(custom_keys={"haed": dict(lr_mult=0.1)}))
    message = str(info.value)
    assert "'haed'" in message and "'head'" in message and "matches no parameter" in message


def test_config_errors():
    with pytest.raises(ConfigError, match="'optimizer'"):
        build_optim_wrapper(Net(), dict(type="OptimWrapper", clip_grad=None))
    with pytest.raises(ConfigError, match="Did you mean 'bias_decay_mult'"):
        build_optim_wrapper(Net(), _cfg(bias_decay_mul=0.0))
    with pytest.raises(ConfigError, match="lr_mult"):
        build_optim_wrapper(Net(), _cfg(custom_keys={"head": dict(lr_mul=2)}))
    with pytest.raises(ConfigError, match="Did you mean 'norm'"):
        build_optim_wrapper(Net(), dict(_cfg(), clip_grad=dict(type="nrm", max_norm=1)))
    with pytest.raises(RegistryError, match="AdamW"):
        build_optim_wrapper(Net(), dict(optimizer=dict(type="AdamWW", lr=0.1)))


def test_custom_constructor():
    @OPTIM_WRAPPER_CONSTRUCTORS.register_module(force=True)
    class HeadOnlyConstructor:
        def __init__(self, optim_wrapper_cfg, paramwise_cfg=None):
            self.lr = optim_wrapper_cfg["optimizer"]["lr"]

        def __call__(self, model):
            return OptimWrapper(torch.optim.SGD(model.head.parameters(), lr=self.lr))

    cfg = dict(_cfg(), constructor="HeadOnlyConstructor")
    wrapper = build_optim_wrapper(Net(), cfg)
    assert sum(len(g["params"]) for g in wrapper.param_groups) == 2


def test_custom_key_sets_only_the_options_it_names():
    model = Net()
    cfg = _cfg(bias_decay_mult=0.0, norm_decay_mult=0.0, custom_keys={"head": dict(lr_mult=10)})
    groups = build_optim_wrapper(model, cfg).param_groups
    options = {n: (g["lr"], g["weight_decay"]) for g in groups for n in _names(model, g)}
    assert options["head.bias"] == pytest.approx((1e-2, 0.0))  # bias_decay_mult still applies
    assert options["head.weight"] == pytest.approx((1e-2, 0.01))
    # a norm layer matched by a key keeps norm_decay_mult; a named decay_mult replaces it
    cfg = _cfg(norm_decay_mult=0.0, bias_decay_mult=0.0,
               custom_keys={"backbone.4": dict(lr_mult=2), "backbone.1.bias": dict(decay_mult=1)})
    groups = build_optim_wrapper(model, cfg).param_groups
    options = {n: (g["lr"], g["weight_decay"]) for g in groups for n in _names(model, g)}
    assert options["backbone.4.weight"] == pytest.approx((2e-3, 0.0))
    assert options["backbone.4.bias"] == pytest.approx((2e-3, 0.0))
    assert options["backbone.1.bias"] == pytest.approx((1e-3, 0.01))
    assert options["backbone.1.weight"] == pytest.approx((1e-3, 0.0))


@pytest.mark.parametrize("entry, message", [
    ({}, "must be a dict with keys among lr_mult, decay_mult"),
    (dict(lr_mult=None), r"custom_keys\['head'\].lr_mult=None: expected a number >= 0"),
    (dict(decay_mult="0"), r"custom_keys\['head'\].decay_mult='0'"),
    (dict(lr_mult=-1), "lr_mult=-1"),
    (3, "must be a dict"),
])
def test_bad_custom_key_entries(entry, message):
    with pytest.raises(ConfigError, match=message):
        build_optim_wrapper(Net(), _cfg(custom_keys={"head": entry}))


def test_bias_lr_mult_none_means_no_multiplier():
    groups = build_optim_wrapper(Net(), _cfg(bias_lr_mult=None)).param_groups
    assert len(groups) == 1
