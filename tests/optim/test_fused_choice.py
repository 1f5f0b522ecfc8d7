"""The optimizer's implementation chosen from the parameters' device (libai/optim/fused.py):
fused kernels when every parameter is on CUDA, torch's default elsewhere, the config always wins,
one log line says which. device="cpu" with the device faked (``device_types`` is what the choice
reads; torch's fused AdamW and SGD also run on the CPU, so the faked builds really step); the
gpu-marked test builds on CUDA."""

import logging

import pytest
import torch
from torch import nn

import libai.optim.fused as fused_module
from libai.optim import build_optim_wrapper


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def lines():
    """The "Optimizer: ..." lines libai's logger gets, with their levels."""
    logger, handler = logging.getLogger("libai"), _Lines()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield lambda level=logging.INFO: [r.getMessage() for r in handler.records
                                      if r.getMessage().startswith("Optimizer:")
                                      and r.levelno >= level]
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def on_cuda(monkeypatch):
    monkeypatch.setattr(fused_module, "device_types", lambda params: {"cuda"})


def _build(cfg, model=None):
    return build_optim_wrapper(model or nn.Linear(4, 3), cfg).optimizer


def test_every_parameter_on_cuda_gets_the_fused_adamw(on_cuda, lines):
    opt = _build(dict(optimizer=dict(type="AdamW", lr=1e-3)))
    assert opt.defaults["fused"] is True and not opt.defaults["foreach"]
    assert lines() == ["Optimizer: AdamW fused (every parameter on CUDA; set "
                       "optim_wrapper.optimizer.fused=False to change)"]


@pytest.mark.parametrize("name", ["Adam", "SGD"])
def test_adam_and_sgd_too_and_with_parameter_groups(on_cuda, name):
    opt = _build(dict(optimizer=dict(type=name, lr=1e-3),
                      paramwise_cfg=dict(bias_decay_mult=0.0)))
    assert opt.defaults["fused"] is True


def test_parameters_on_the_cpu_keep_torchs_default(lines):
    opt = _build(dict(optimizer=dict(type="AdamW", lr=1e-3)))
    assert opt.defaults["fused"] is None and opt.defaults["foreach"] is None
    assert lines() == []  # nothing chosen: said at DEBUG only
    assert lines(logging.DEBUG) == [
        "Optimizer: AdamW with torch's default kernels (parameters on cpu; set "
        "optim_wrapper.optimizer.fused=True/False or foreach=... to change)"]


@pytest.mark.parametrize("given", [dict(fused=False), dict(foreach=True), dict(fused=True)])
def test_the_config_always_wins(on_cuda, lines, given):
    opt = _build(dict(optimizer=dict(type="AdamW", lr=1e-3, **given)))
    for key, value in given.items():
        assert opt.defaults[key] is value
    if "fused" not in given:
        assert opt.defaults["fused"] is None
    said = ", ".join(f"{k}={v}" for k, v in given.items())
    assert lines() == [f"Optimizer: AdamW with {said} (as optim_wrapper.optimizer says)"]


def test_graph_mode_keeps_torchs_default(on_cuda, lines):
    opt = _build(dict(type="GraphOptimWrapper", optimizer=dict(type="AdamW", lr=1e-3)))
    assert opt.defaults["fused"] is None
    assert "graph mode compiles the update" in lines(logging.DEBUG)[0]


def test_a_mix_of_sharded_and_plain_parameters_gets_single_tensor_kernels(on_cuda, monkeypatch,
                                                                           lines):
    # tensor parallel: split layers are DTensors, the rest plain tensors; neither the fused nor
    # the foreach kernels take such a list (torch: "got mixed torch.Tensor and DTensor")
    monkeypatch.setattr(fused_module, "_meshes", lambda params: (1, {0}))
    opt = _build(dict(optimizer=dict(type="AdamW", lr=1e-3)))
    assert opt.defaults["foreach"] is False and opt.defaults["fused"] is None
    assert "single-tensor" in lines()[0]


def test_dtensors_on_one_mesh_get_the_fused_kernels(on_cuda, monkeypatch):
    model = nn.Linear(4, 3)  # FSDP2: every parameter a DTensor on the one mesh
    monkeypatch.setattr(fused_module, "_meshes", lambda params: (len(params), {0}))
    assert _build(dict(optimizer=dict(type="AdamW", lr=1e-3)), model).defaults["fused"] is True


def test_other_optimizers_are_left_alone(on_cuda, lines):
    opt = _build(dict(optimizer=dict(type="Adagrad", lr=1e-3)))
    assert not opt.defaults.get("fused")
    assert lines(logging.DEBUG) == []


def test_a_built_optimizer_is_driven_as_is(on_cuda):
    model = nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    assert _build(dict(optimizer=opt), model).defaults["fused"] is None


def _float16_steps(fused):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    given = {} if fused is None else {"fused": fused}
    wrapper = build_optim_wrapper(model, dict(type="AmpOptimWrapper", dtype="float16",
                                              optimizer=dict(type="AdamW", lr=1e-2, **given),
                                              clip_grad=dict(max_norm=1.0)))
    for _ in range(3):  # the first overflows at the initial scale and is skipped
        with wrapper.optim_context(model):
            loss = model(torch.randn(8, 4)).square().mean()
        wrapper.update_params(loss)
    return wrapper, model.weight.detach()


def test_fused_adamw_under_a_grad_scaler_trains_as_the_single_tensor_one(on_cuda):
    """The GradScaler hands a fused optimizer its inf check as a tensor (no read per step)."""
    from libai.optim.amp_optim_wrapper import _float16_supported

    if not _float16_supported("cpu"):
        pytest.skip("this torch build has no float16 autocast on the CPU")
    wrapper, fused = _float16_steps(None)
    assert wrapper.optimizer.defaults["fused"] is True
    assert int(wrapper.optimizer.state[wrapper.optimizer.param_groups[0]["params"][0]]["step"]) == 2
    _, single = _float16_steps(False)
    torch.testing.assert_close(fused, single)


@pytest.mark.gpu
def test_on_cuda_the_built_adamw_is_fused(lines):
    model = nn.Linear(4, 3).cuda()
    opt = _build(dict(optimizer=dict(type="AdamW", lr=1e-3)), model)
    assert opt.defaults["fused"] is True
    loss = model(torch.randn(2, 4, device="cuda")).sum()
    loss.backward()
    opt.step()
    assert opt.state[model.weight]["step"].is_cuda  # fused keeps the step counter on the device
    assert "AdamW fused" in lines()[0]
