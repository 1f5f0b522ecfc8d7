"""AmpOptimWrapper on CPU: bfloat16 autocast, float16 with GradScaler (or its clear error)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import libai.optim.amp_optim_wrapper as amp_module
from libai.optim import AmpOptimWrapper, build_optim_wrapper
from libai.utils.errors import ConfigError

FP16_ON_CPU = amp_module._float16_supported("cpu")


def _tiny() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    x = torch.randn(16, 4)
    y = x.sum(dim=1, keepdim=True)
    return model, x, y


def _train(wrapper: AmpOptimWrapper, model: nn.Module, x, y, steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        with wrapper.optim_context(model):
            out = model(x)
            loss = ((out.float() - y) ** 2).mean()
        wrapper.update_params(loss)
        losses.append(loss.item())
    return losses


def test_bfloat16_on_cpu_trains():
    model, x, y = _tiny()
    before = copy.deepcopy(model.state_dict())
    wrapper = AmpOptimWrapper(
        torch.optim.SGD(model.parameters(), lr=0.05),
        dtype="bfloat16",
        clip_grad=dict(type="norm", max_norm=10.0),
    )
    assert wrapper.scaler is None
    with wrapper.optim_context(model):
        assert model(x).dtype == torch.bfloat16
    assert model(x).dtype == torch.float32  # autocast only inside the context
    losses = _train(wrapper, model, x, y, steps=15)
    assert losses[-1] < losses[0]
    assert not torch.equal(model[0].weight, before["0.weight"])
    assert model[0].weight.dtype == torch.float32
    assert set(wrapper.scalars()) == {"grad_norm"}
    assert "loss_scaler" not in wrapper.state_dict()


def test_bad_dtype_suggests():
    model, _, _ = _tiny()
    with pytest.raises(ConfigError, match="Did you mean 'bfloat16'"):
        AmpOptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1), dtype="bfloat61")


@pytest.mark.skipif(not FP16_ON_CPU, reason="this torch build has no float16 autocast on CPU")
def test_float16_gradscaler_on_cpu():
    model, x, y = _tiny()
    wrapper = AmpOptimWrapper(
        torch.optim.SGD(model.parameters(), lr=0.05),
        dtype="float16",
        loss_scale=dict(init_scale=2.0**10, growth_interval=3),
        clip_grad=dict(type="norm", max_norm=10.0),
    )
    assert wrapper.scaler is not None
    with wrapper.optim_context(model):
        assert model(x).dtype == torch.float16
    losses = _train(wrapper, model, x, y, steps=15)
    assert losses[-1] < losses[0]
    scalars = wrapper.scalars()
    assert scalars["loss_scale"] > 2.0**10  # grew every 3 finite steps
    # grad_norm is measured on unscaled gradients: a few units, not thousands
    assert 0 < scalars["grad_norm"] < 100
    state = wrapper.state_dict()
    other = AmpOptimWrapper(torch.optim.SGD(model.parameters(), lr=0.05), dtype="float16")
    other.load_state_dict(state)
    assert other.scaler.get_scale() == scalars["loss_scale"]


@pytest.mark.skipif(not FP16_ON_CPU, reason="this torch build has no float16 autocast on CPU")
def test_float16_static_loss_scale_and_bad_loss_scale():
    model, x, y = _tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    wrapper = AmpOptimWrapper(opt, dtype="float16", loss_scale=512.0)
    _train(wrapper, model, x, y, steps=4)
    assert wrapper.scalars()["loss_scale"] == 512.0  # finite steps never grow it
    with pytest.raises(ConfigError, match="dynamic"):
        AmpOptimWrapper(opt, dtype="float16", loss_scale="dynamc")
    with pytest.raises(ConfigError, match="GradScaler"):
        AmpOptimWrapper(opt, dtype="float16", loss_scale=dict(init_scal=2.0))


def test_float16_unsupported_on_cpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(amp_module, "_float16_supported", lambda device_type: False)
    model, _, _ = _tiny()
    with pytest.raises(ConfigError, match="bfloat16"):
        AmpOptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1), dtype="float16")


def test_build_amp_from_config():
    model, x, y = _tiny()
    cfg = dict(
        type="AmpOptimWrapper",
        dtype="bfloat16",
        accumulative_counts=2,
        optimizer=dict(type="AdamW", lr=1e-2),
    )
    wrapper = build_optim_wrapper(model, cfg)
    assert isinstance(wrapper, AmpOptimWrapper) and wrapper.accumulative_counts == 2
    assert "AmpOptimWrapper" in repr(wrapper) and "bfloat16" in repr(wrapper)
    losses = _train(wrapper, model, x, y, steps=8)
    assert losses[-1] < losses[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_amp(dtype):
    if dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    model, x, y = _tiny()
    model, x, y = model.cuda(), x.cuda(), y.cuda()
    wrapper = AmpOptimWrapper(torch.optim.SGD(model.parameters(), lr=0.05), dtype=dtype)
    with wrapper.optim_context(model):
        assert model(x).dtype == getattr(torch, dtype)
    losses = _train(wrapper, model, x, y, steps=15)
    assert losses[-1] < losses[0]
    assert ("loss_scale" in wrapper.scalars()) == (dtype == "float16")
