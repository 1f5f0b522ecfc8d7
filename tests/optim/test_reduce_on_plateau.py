"""ReduceOnPlateauLR: patience, cooldown, rules, floor, errors and state."""

from __future__ import annotations

import pytest
import torch

from libai.optim import ReduceOnPlateauLR, apply_schedulers, build_param_schedulers
from libai.utils.errors import ConfigError


def _sgd(lr: float = 1.0) -> torch.optim.SGD:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


def _feed(s: ReduceOnPlateauLR, values, key: str = "loss") -> list[float]:
    out = []
    for v in values:
        s.step_metrics({key: v})
        out.append(s.current_factor)
    return out


def test_less_rule_with_patience():
    s = ReduceOnPlateauLR(factor=0.5, patience=2)
    # 1.0 best; 0.9 better; then three evaluations without improvement: the third reduces
    assert _feed(s, [1.0, 0.9, 0.95, 0.95, 0.95, 0.95]) == [1, 1, 1, 1, 0.5, 0.5]


def test_greater_rule_threshold_and_cooldown():
    s = ReduceOnPlateauLR(
        monitor="acc",
        rule="greater",
        factor=0.1,
        patience=0,
        cooldown=1,
        threshold=0.01,
        threshold_mode="abs",
    )
    # 0.505 is not 0.01 better than 0.5: a bad evaluation -> reduce; the next is cooldown
    got = _feed(s, [0.5, 0.505, 0.4, 0.4, 0.6], key="acc")
    assert got == pytest.approx([1.0, 0.1, 0.1, 0.01, 0.01])


def test_factor_applies_to_lr_with_min_value_and_window():
    opt = _sgd(lr=1.0)
    (s,) = build_param_schedulers(
        [dict(type="ReduceOnPlateauLR", factor=0.1, patience=0, min_value=0.05, begin=5)], opt
    )
    apply_schedulers(opt, [s], 0)
    assert opt.param_groups[0]["lr"] == 1.0
    _feed(s, [1.0, 2.0])
    apply_schedulers(opt, [s], 4)
    assert opt.param_groups[0]["lr"] == 1.0  # before begin
    apply_schedulers(opt, [s], 6)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)
    _feed(s, [3.0])
    apply_schedulers(opt, [s], 7)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)  # floored at min_value


def test_evaluations_outside_window_are_ignored():
    s = ReduceOnPlateauLR(factor=0.5, patience=0, begin=10, end=20)
    for v in (1.0, 2.0, 3.0):
        s.step_metrics({"loss": v}, iteration=5)
    assert s.current_factor == 1.0
    s.step_metrics({"loss": 1.0}, iteration=12)
    s.step_metrics({"loss": 2.0}, iteration=13)
    assert s.current_factor == 0.5


def test_unknown_monitor_suggests():
    s = ReduceOnPlateauLR(monitor="val_los")
    with pytest.raises(ConfigError, match="Did you mean 'val_loss'"):
        s.step_metrics({"val_loss": 1.0, "acc": 0.3})
    with pytest.raises(ConfigError, match="'greater'"):
        ReduceOnPlateauLR(rule="greatr")


def test_state_dict_round_trip():
    s = ReduceOnPlateauLR(factor=0.5, patience=1, cooldown=2)
    _feed(s, [1.0, 1.1, 1.2, 1.3])
    state = s.state_dict()
    assert state["current_factor"] == 0.5 and state["best"] == 1.0
    t = ReduceOnPlateauLR(factor=0.5, patience=1, cooldown=2)
    t.load_state_dict(state)
    values = [1.4, 1.5, 1.6, 1.7, 0.1]
    assert _feed(t, values) == _feed(s, values)
