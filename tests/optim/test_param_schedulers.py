"""Schedulers against torch.optim.lr_scheduler golden values and hand-computed values."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch.optim import lr_scheduler as torch_sched

from libai.optim import (
    ConstantLR,
    CosineAnnealingLR,
    ExponentialLR,
    LinearLR,
    MultiStepLR,
    OneCycleLR,
    OptimWrapper,
    PolyLR,
    StepLR,
    apply_schedulers,
    build_param_schedulers,
)
from libai.registry import PARAM_SCHEDULERS
from libai.utils.errors import ConfigError

BASE_LR = 0.1
N = 100


def _sgd(lr: float = BASE_LR, **kw) -> torch.optim.SGD:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=lr, **kw)


def _torch_lrs(make, n: int = N, lr: float = BASE_LR) -> list[float]:
    opt = _sgd(lr)
    sched = make(opt)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(n):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
    return out


def _our_lrs(schedulers, n: int = N, lr: float = BASE_LR, param: str = "lr") -> list[float]:
    opt = _sgd(lr)
    out = []
    for t in range(n):
        apply_schedulers(opt, schedulers, t)
        out.append(opt.param_groups[0][param])
    return out


GOLDEN = [
    (
        lambda o: torch_sched.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=20),
        lambda: LinearLR(start_factor=0.1, end_factor=1.0, end=21),
    ),
    (
        lambda o: torch_sched.LinearLR(o, start_factor=1.0, end_factor=0.2, total_iters=40),
        lambda: LinearLR(start_factor=1.0, end_factor=0.2, end=41),
    ),
    (
        lambda o: torch_sched.ConstantLR(o, factor=0.5, total_iters=30),
        lambda: ConstantLR(factor=0.5, end=30),
    ),
    (
        lambda o: torch_sched.CosineAnnealingLR(o, T_max=N, eta_min=0.001),
        lambda: CosineAnnealingLR(eta_min=0.001, max_iters=N),
    ),
    (
        lambda o: torch_sched.CosineAnnealingLR(o, T_max=N),
        lambda: CosineAnnealingLR(end=N),
    ),
    (
        lambda o: torch_sched.MultiStepLR(o, milestones=[30, 60, 80], gamma=0.5),
        lambda: MultiStepLR(milestones=[60, 30, 80], gamma=0.5),
    ),
    (
        lambda o: torch_sched.StepLR(o, step_size=25, gamma=0.3),
        lambda: StepLR(step_size=25, gamma=0.3),
    ),
    (
        lambda o: torch_sched.ExponentialLR(o, gamma=0.97),
        lambda: ExponentialLR(gamma=0.97),
    ),
    (
        lambda o: torch_sched.PolynomialLR(o, total_iters=N, power=2.0),
        lambda: PolyLR(power=2.0, end=N),
    ),
    (
        lambda o: torch_sched.OneCycleLR(o, max_lr=0.5, total_steps=N, cycle_momentum=False),
        lambda: OneCycleLR(eta_max=0.5, end=N),
    ),
    (
        lambda o: torch_sched.OneCycleLR(
            o,
            max_lr=0.5,
            total_steps=N,
            pct_start=0.2,
            anneal_strategy="linear",
            div_factor=10,
            final_div_factor=100,
            cycle_momentum=False,
        ),
        lambda: OneCycleLR(
            eta_max=0.5,
            pct_start=0.2,
            anneal_strategy="linear",
            div_factor=10,
            final_div_factor=100,
            end=N,
        ),
    ),
    (
        lambda o: torch_sched.OneCycleLR(
            o, max_lr=0.5, total_steps=N, three_phase=True, cycle_momentum=False
        ),
        lambda: OneCycleLR(eta_max=0.5, three_phase=True, end=N),
    ),
]


@pytest.mark.parametrize("make_torch, make_ours", GOLDEN)
def test_golden_against_torch(make_torch, make_ours):
    expected = _torch_lrs(make_torch)
    got = _our_lrs([make_ours()])
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_cosine_periodic_matches_torch_closed_form():
    got = _our_lrs([CosineAnnealingLR(T_max=30, end=N)])
    expected = [BASE_LR * (1 + math.cos(math.pi * t / 30)) / 2 for t in range(N)]
    assert got == pytest.approx(expected, abs=1e-12)
    torch_values = _torch_lrs(lambda o: torch_sched.CosineAnnealingLR(o, T_max=30))
    assert got == pytest.approx(torch_values, abs=1e-9)


def test_window_before_and_after():
    s = StepLR(step_size=2, gamma=0.5, begin=10, end=16)
    assert [s.factor(t) for t in (0, 9, 10, 11, 12, 15, 16, 100)] == [
        1.0,
        1.0,
        1.0,
        1.0,
        0.5,
        0.25,
        0.25,
        0.25,
    ]
    linear = LinearLR(start_factor=0.0, end_factor=1.0, begin=5, end=10)
    assert [linear.factor(t) for t in (4, 5, 7, 9, 50)] == [1.0, 0.0, 0.5, 1.0, 1.0]


def test_chained_warmup_and_cosine():
    schedulers = [
        LinearLR(start_factor=0.1, begin=0, end=10),
        CosineAnnealingLR(begin=10, max_iters=N),
    ]
    lrs = _our_lrs(schedulers)
    assert lrs[0] == pytest.approx(0.01)
    assert lrs[5] == pytest.approx(0.1 * (0.1 + 0.9 * 5 / 9))
    assert lrs[9] == pytest.approx(0.1)
    assert lrs[10] == pytest.approx(0.1)
    assert lrs[55] == pytest.approx(0.05)
    assert lrs[99] == pytest.approx(0.1 * (1 + math.cos(math.pi * 89 / 90)) / 2)


def test_same_param_schedulers_multiply():
    lrs = _our_lrs([ExponentialLR(gamma=0.9), ConstantLR(factor=0.5, end=3)], n=5)
    assert lrs == pytest.approx([0.05, 0.045, 0.0405, 0.1 * 0.9**3, 0.1 * 0.9**4])


def test_by_epoch_converts_to_iterations():
    by_epoch = StepLR(step_size=2, gamma=0.5, by_epoch=True, epoch_length=10)
    by_iter = StepLR(step_size=20, gamma=0.5)
    assert [by_epoch.factor(t) for t in range(80)] == [by_iter.factor(t) for t in range(80)]
    lin = LinearLR(begin=1, end=3, by_epoch=True, epoch_length=5)
    assert (lin.begin, lin.end) == (5, 15)
    ms = MultiStepLR(milestones=[1, 3], by_epoch=True, epoch_length=7)
    assert ms.milestones == [7, 21]
    cos = CosineAnnealingLR(T_max=2, by_epoch=True, epoch_length=50, max_iters=500)
    assert cos.T_max == 100 and cos.end == 500
    with pytest.raises(ConfigError, match="epoch_length"):
        StepLR(step_size=2, by_epoch=True)


def test_build_param_schedulers_by_epoch_and_default_end():
    opt = _sgd()
    cfg = [
        dict(type="LinearLR", start_factor=0.5, end=1, by_epoch=True),
        dict(type="CosineAnnealingParamScheduler", begin=1, by_epoch=True),
    ]
    schedulers = build_param_schedulers(cfg, opt, max_iters=40, epoch_length=10)
    assert [(s.begin, s.end) for s in schedulers] == [(0, 10), (10, 40)]
    assert schedulers[1].T_max == 30


def test_momentum_sgd_and_adam_betas():
    p = torch.nn.Parameter(torch.zeros(2))
    sgd = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    adam = torch.optim.Adam([p], lr=0.1, betas=(0.9, 0.999))
    sched = [LinearLR(start_factor=0.5, end_factor=1.0, end=3, param_name="momentum")]
    apply_schedulers(sgd, sched, 0)
    apply_schedulers(adam, sched, 0)
    assert sgd.param_groups[0]["momentum"] == pytest.approx(0.45)
    assert adam.param_groups[0]["betas"] == pytest.approx((0.45, 0.999))
    assert adam.param_groups[0]["initial_momentum"] == pytest.approx(0.9)
    apply_schedulers(adam, sched, 2)
    assert adam.param_groups[0]["betas"] == pytest.approx((0.9, 0.999))
    wrapper = OptimWrapper(adam)
    assert wrapper.get_momentum() == {"momentum": [pytest.approx(0.9)]}


def test_initial_value_kept_in_optimizer_state():
    opt = _sgd()
    apply_schedulers(opt, [ExponentialLR(gamma=0.5)], 3)
    state = opt.state_dict()
    assert state["param_groups"][0]["initial_lr"] == BASE_LR
    other = _sgd(lr=1.0)
    other.load_state_dict(state)
    apply_schedulers(other, [ExponentialLR(gamma=0.5)], 4)
    assert other.param_groups[0]["lr"] == pytest.approx(BASE_LR * 0.5**4)


def test_weight_decay_and_per_group_eta_min():
    p1, p2 = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([{"params": [p1]}, {"params": [p2], "lr": 1.0}], lr=0.1, weight_decay=0.1)
    sched = [
        CosineAnnealingLR(eta_min=0.01, end=10),
        LinearLR(start_factor=0.0, end=5, param_name="weight_decay"),
    ]
    apply_schedulers(opt, sched, 9)
    half = (1 + math.cos(math.pi * 9 / 10)) / 2
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01 + 0.09 * half)
    assert opt.param_groups[1]["lr"] == pytest.approx(0.01 + 0.99 * half)
    assert opt.param_groups[0]["weight_decay"] == pytest.approx(0.1)
    apply_schedulers(opt, sched, 2)
    assert opt.param_groups[1]["weight_decay"] == pytest.approx(0.05)


def test_errors_name_the_problem():
    opt = _sgd()
    with pytest.raises(ConfigError, match="Did you mean 'lr'"):
        build_param_schedulers([dict(type="StepLR", step_size=2, param_name="lrr")], opt)
    with pytest.raises(ConfigError, match="Did you mean 'begin'"):
        build_param_schedulers([dict(type="StepLR", step_size=2, begn=3)], opt)
    with pytest.raises(ConfigError, match="end"):
        build_param_schedulers([dict(type="CosineAnnealingLR")], opt)
    with pytest.raises(ConfigError, match="empty"):
        LinearLR(begin=5, end=5)
    with pytest.raises(ConfigError, match="one per group"):
        build_param_schedulers([dict(type="OneCycleLR", eta_max=[1, 2])], opt, max_iters=10)


def test_a_window_after_the_end_of_training_is_one_line_with_the_key():
    # a shortened run: --cfg-options train_cfg.max_iters=50 with an absolute 100-iteration warm-up
    opt = _sgd()
    cfg = [dict(type="LinearLR", start_factor=0.1, begin=0, end=100),
           dict(type="CosineAnnealingLR", begin=100)]
    with pytest.raises(ConfigError) as e:
        build_param_schedulers(cfg, opt, max_iters=50)
    assert str(e.value) == (
        "param_scheduler.1.begin=100 iterations but training ends at 50 (train_cfg.max_iters): "
        "CosineAnnealingLR would never apply. Lower param_scheduler.1.begin, or write it "
        "relative to the run (a fraction such as 0.05, or dict(iters=100, at_most=0.1)).")


def test_registry_names_and_pure_state_dict():
    for name in ("LinearLR", "LinearParamScheduler", "PolyLR", "ReduceOnPlateauLR"):
        assert name in PARAM_SCHEDULERS
    s = PolyLR(power=2.0, end=10)
    state = s.state_dict()
    assert state["power"] == 2.0 and state["end"] == 10 and state["param_name"] == "lr"
    s.load_state_dict(state)
