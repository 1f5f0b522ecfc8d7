"""A built optimizer (or optim wrapper) where the config expects a dict."""

import copy

import pytest
import torch

from libai.optim import AmpOptimWrapper, OptimWrapper, build_optim_wrapper
from libai.runner import Runner
from libai.testing import ToyModel, toy_config
from libai.utils.errors import ConfigError

QUIET = dict(logger=dict(interval=5, progress_bar=False, plot=False), checkpoint=None)


def runner_with(tmp_path, model, optim_wrapper, **overrides):
    # toy_config deep-copies its overrides, which would part an optimizer from its model
    cfg = toy_config(work_dir=str(tmp_path), default_hooks=QUIET, **overrides)
    cfg["model"], cfg["optim_wrapper"] = model, optim_wrapper
    return Runner.from_cfg(cfg)


def test_built_optimizer_trains_like_the_same_optimizer_from_a_dict(tmp_path):
    torch.manual_seed(0)
    base = ToyModel()
    model_a, model_b = copy.deepcopy(base), copy.deepcopy(base)
    runner_a = runner_with(tmp_path / "a", model_a,
                           dict(optimizer=dict(type="SGD", lr=0.1, momentum=0.9)))
    runner_a.train()
    optimizer = torch.optim.SGD(model_b.parameters(), lr=0.1, momentum=0.9)
    runner_b = runner_with(tmp_path / "b", model_b, dict(optimizer=optimizer))
    runner_b.train()
    assert runner_b.optim_wrapper.optimizer is optimizer
    assert runner_b.iter == 20
    # both on the runner's device, the same kernels in the same order: bit-identical on any device
    for (name, a), b in zip(model_a.state_dict().items(), model_b.state_dict().values()):
        assert torch.equal(a, b), name
    # the base stayed on the CPU; model_b trained on the runner's device (CUDA where there is one)
    assert not torch.equal(base.state_dict()["net.0.weight"],
                           model_b.state_dict()["net.0.weight"].cpu())


def test_adamw_from_the_issue_with_wrapper_options(tmp_path):
    model = ToyModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    runner = runner_with(tmp_path, model, dict(optimizer=optimizer, accumulative_counts=2,
                                               clip_grad=dict(max_norm=1.0)))
    wrapper = runner.optim_wrapper
    assert type(wrapper) is OptimWrapper and wrapper.optimizer is optimizer
    assert wrapper.accumulative_counts == 2
    runner.train()
    assert optimizer.state  # it stepped


def test_amp_wrapper_type_with_a_built_optimizer():
    model = ToyModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    wrapper = build_optim_wrapper(model, dict(type="AmpOptimWrapper", dtype="bfloat16",
                                              optimizer=optimizer))
    assert isinstance(wrapper, AmpOptimWrapper) and wrapper.optimizer is optimizer


def test_optimizer_on_part_of_the_model_is_fine():
    model = ToyModel()
    optimizer = torch.optim.SGD(model.net[2].parameters(), lr=0.1)
    wrapper = build_optim_wrapper(model, dict(optimizer=optimizer))
    assert wrapper.optimizer is optimizer


def test_paramwise_cfg_cannot_apply_to_a_built_optimizer():
    model = ToyModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(ConfigError) as exc:
        build_optim_wrapper(model, dict(optimizer=optimizer,
                                        paramwise_cfg=dict(bias_decay_mult=0.0)))
    msg = str(exc.value)
    assert "paramwise_cfg cannot apply to a built optimizer (AdamW)" in msg
    assert "dict(type='AdamW', lr=...)" in msg


def test_optimizer_built_on_another_model_is_refused(tmp_path):
    other = ToyModel()
    optimizer = torch.optim.AdamW(other.parameters(), lr=1e-3)
    # the model as a dict: the runner builds a new one, which the optimizer knows nothing of
    runner = runner_with(tmp_path, dict(type="ToyModel"), dict(optimizer=optimizer))
    with pytest.raises(ConfigError) as exc:
        runner.train()
    msg = str(exc.value)
    assert msg.startswith("optim_wrapper.optimizer: 4 of the 4 parameters of the built AdamW are "
                          "not parameters of the model the runner trains (ToyModel).")
    assert "model=..." in msg and "dict(type='AdamW', lr=...)" in msg


def test_built_optim_wrapper_is_passed_through(tmp_path):
    model = ToyModel()
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1), accumulative_counts=2)
    runner = runner_with(tmp_path, model, wrapper)
    assert runner.optim_wrapper is wrapper
    runner.train()
    assert runner.iter == 20


def test_built_optim_wrapper_on_another_model_is_refused():
    wrapper = OptimWrapper(torch.optim.SGD(ToyModel().parameters(), lr=0.1))
    with pytest.raises(ConfigError, match=r"^optim_wrapper: 4 of the 4 parameters of the built SGD"):
        build_optim_wrapper(ToyModel(), wrapper)


@pytest.mark.parametrize("cfg, expected", [
    ("optimizer", r"optim_wrapper is a SGD, an optimizer: give it as optim_wrapper=dict\(optimizer="),
    (dict(optimizer="AdamW"), r"optim_wrapper.optimizer must be a dict .* or a built "
                              r"torch.optim.Optimizer, got str 'AdamW'"),
    ([1, 2], r"optim_wrapper must be a dict .* or a built OptimWrapper, got list"),
])
def test_wrong_objects_say_what_is_accepted(cfg, expected):
    model = ToyModel()
    if cfg == "optimizer":
        cfg = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ConfigError, match=expected):
        build_optim_wrapper(model, cfg)
