"""NonFiniteLossHook(policy='skip') on a fused optimizer: the verdict stays on the device, the
fused kernel skips the step itself (every step protected, nothing read per step), and the
warning, counters and ``max_skips`` come at the log line. device="cpu": torch's fused AdamW runs
on the CPU too and honours ``found_inf`` there as on CUDA."""

import pytest
import torch
from test_nonfinite_loss_hook import TwoParams, one_iteration

from libai.hooks import LoggerHook, NonFiniteLossHook
from libai.utils.errors import TrainingError


def _runner(make_runner, interval=3, **kw):
    model = TwoParams()
    logger = LoggerHook(interval=interval, backends=[], progress_bar=False, plot=False)
    runner = make_runner(NonFiniteLossHook(policy="skip", **kw), logger, model=model, max_iters=6)
    runner.optim_wrapper.optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    runner.call_hook("before_run")
    runner.call_hook("before_train")
    return runner, model


def test_the_fused_kernel_skips_the_step_and_the_line_reports_it(make_runner, monkeypatch):
    runner, model = _runner(make_runner)
    hook, opt = runner.hooks[0], runner.optim_wrapper.optimizer
    reads = []
    for name in ("tolist", "item", "__bool__"):  # the reads a per-step check would make
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda t, _f=original: reads.append(runner.iter)
                            or _f(t))
    losses = []
    for i in range(3):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        losses.append(one_iteration(runner, model, i, poison=i == 1))
        changed = {n: not torch.equal(before[n], p) for n, p in model.named_parameters()}
        assert changed == ({"good": False, "bad": False} if i == 1 else
                           {"good": True, "bad": True})
        assert "found_inf" not in opt.__dict__  # handed for the step only
        if i == 1:  # the step is skipped, nothing read yet: the line says it
            assert hook.skipped_total == 0 and not any("Non-finite" in m for m in runner.messages)
            assert reads == []
            assert hook.state_dict() == {"skipped_total": 1, "skipped_in_row": 1}  # a save counts it
            reads.clear()  # that read was the save's
    assert reads and set(reads) == {2}  # at the line only (the verdicts', the logger's)
    assert int(opt.state[model.good]["step"]) == 2  # the skipped step is not counted
    assert hook.skipped_total == 1 and hook.skipped_in_row == 0
    warning = next(m for m in runner.messages if "Non-finite gradients" in m)
    assert "iteration 2" in warning and "bad" in warning and "good" not in warning
    # the skipped step's NaN loss stayed out of the line's average
    assert runner.message_hub.latest("train/loss") == pytest.approx((losses[0] + losses[2]) / 2)
    assert all("nan" not in m for m in runner.messages if m.startswith("Iter"))


def test_max_skips_is_enforced_at_the_line(make_runner):
    runner, model = _runner(make_runner, interval=3, max_skips=2)
    good = model.good.detach().clone()
    one_iteration(runner, model, 0, poison=True)
    one_iteration(runner, model, 1, poison=True)
    with pytest.raises(TrainingError, match="3 optimizer steps in a row"):
        one_iteration(runner, model, 2, poison=True)
    assert torch.equal(model.good, good)  # none of them stepped


def test_a_validation_settles_first(make_runner):
    runner, model = _runner(make_runner, interval=5)
    one_iteration(runner, model, 0, poison=True)
    runner.call_hook("before_val")
    assert runner.hooks[0].skipped_total == 1


def test_a_non_fused_optimizer_keeps_the_check_before_each_step(make_runner):
    runner, model = _runner(make_runner)
    runner.optim_wrapper.optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    runner.call_hook("before_train")
    one_iteration(runner, model, 0, poison=True)
    assert runner.hooks[0].skipped_total == 1  # read right away: grads dropped before the step
