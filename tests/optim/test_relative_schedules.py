"""Schedules written relative to the run's length: golden values at several run lengths."""

import math

import pytest

from libai.optim import build_param_schedulers
from libai.optim.scheduler.param_scheduler import fraction_of_run
from libai.utils.errors import ConfigError

WARMUP = dict(iters=100, at_most=0.1)  # the shipped warm-up: 100 iterations, at most 10%
SHIPPED = [dict(type="LinearLR", start_factor=0.1, begin=0, end=WARMUP),
           dict(type="CosineAnnealingLR", begin=WARMUP, eta_min_ratio=0.0)]


def _opt():
    import torch

    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)


def _lr(schedulers, t):
    return math.prod(s.factor(t) for s in schedulers)


@pytest.mark.parametrize("max_iters, warmup", [(1, 1), (10, 1), (100, 10), (2000, 100),
                                               (10**6, 100)])
def test_warm_up_is_capped_and_the_decay_reaches_the_end(max_iters, warmup):
    linear, cosine = build_param_schedulers(SHIPPED, _opt(), max_iters=max_iters)
    assert (linear.begin, linear.end) == (0, warmup)
    assert cosine.begin == warmup
    assert cosine.end == (max_iters if warmup < max_iters else warmup + 1)


def test_golden_values_of_the_shipped_schedule():
    sched = build_param_schedulers(SHIPPED, _opt(), max_iters=100)  # warm-up 10, cosine 90
    golden = {0: 0.1, 5: 0.6, 9: 1.0, 10: 1.0, 55: 0.5, 99: (1 + math.cos(math.pi * 89 / 90)) / 2}
    for t, value in golden.items():
        assert _lr(sched, t) == pytest.approx(value, abs=1e-12), t
    sched = build_param_schedulers(SHIPPED, _opt(), max_iters=2000)  # warm-up 100, cosine 1900
    assert [_lr(sched, t) for t in (0, 99, 100, 1050)] == pytest.approx([0.1, 1.0, 1.0, 0.5])
    # a one-iteration warm-up is already at its end value (LinearLR reaches it at end - 1)
    one = build_param_schedulers(SHIPPED, _opt(), max_iters=1)
    assert _lr(one, 0) == 1.0


def test_fractions_and_end_of_training():
    cfg = [dict(type="LinearLR", start_factor=0.5, begin=0, end=0.25),
           dict(type="PolyLR", begin=0.25, end=-1, power=1.0)]
    linear, poly = build_param_schedulers(cfg, _opt(), max_iters=40)
    assert (linear.begin, linear.end, poly.begin, poly.end) == (0, 10, 10, 40)
    assert poly.factor(10) == 1.0 and poly.factor(25) == pytest.approx(1 - 15 / 30)
    assert [fraction_of_run(f, 10) for f in (0.01, 0.05, 0.5, 1.0)] == [1, 1, 5, 10]
    (cos,) = build_param_schedulers([dict(type="CosineAnnealingLR", end=0.5)], _opt(),
                                    max_iters=40)
    assert cos.end == 20 and cos.factor(30) == cos.factor(19)  # holds its last value


def test_relative_positions_are_checked():
    with pytest.raises(ConfigError, match="unknown here"):
        build_param_schedulers([dict(type="LinearLR", end=0.1)], _opt())
    with pytest.raises(ConfigError, match="Did you mean 'at_most'"):
        build_param_schedulers([dict(type="LinearLR", end=dict(iters=5, at_mst=0.1))], _opt(),
                               max_iters=10)
    with pytest.raises(ConfigError, match=r"in \(0, 1\]"):
        build_param_schedulers([dict(type="LinearLR", end=dict(iters=5, at_most=2))], _opt(),
                               max_iters=10)
    with pytest.raises(ConfigError, match="fraction of an iteration"):
        build_param_schedulers([dict(type="LinearLR", end=2.5)], _opt(), max_iters=10)
