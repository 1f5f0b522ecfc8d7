import pytest
import torch
from torch import nn

from libai.hooks import LoggerHook, NonFiniteLossHook
from libai.utils.errors import ConfigError, TrainingError


def _nan_at(bad_iter):
    def outputs(i):
        value = float("nan") if i == bad_iter else 0.5
        return {
            "loss": torch.tensor(value),
            "loss_cls": torch.tensor(value),
            "acc": torch.tensor(0.9),
        }

    return outputs


def test_raise_names_iteration_values_and_fixes(make_runner, run_iters):
    runner = make_runner(NonFiniteLossHook(), max_iters=5)
    with pytest.raises(TrainingError) as e:
        run_iters(runner, outputs=_nan_at(2))
    msg = str(e.value)
    assert "iteration 3" in msg  # the 3rd iteration (0-based 2)
    assert "loss=nan" in msg and "loss_cls=nan" in msg and "acc=0.9" in msg
    assert "learning rate" in msg and "clip_grad" in msg and "loss scale" in msg
    assert "policy='skip'" in msg


def test_inf_in_a_secondary_loss(make_runner, run_iters):
    runner = make_runner(NonFiniteLossHook(), max_iters=2)
    with pytest.raises(TrainingError, match="iteration 1"):
        run_iters(
            runner,
            outputs=lambda i: {"loss": torch.tensor(1.0), "loss_aux": torch.tensor(float("inf"))},
        )


def test_non_loss_entries_are_ignored(make_runner, run_iters):
    runner = make_runner(NonFiniteLossHook(), max_iters=2)
    run_iters(
        runner, outputs=lambda i: {"loss": torch.tensor(1.0), "ratio": torch.tensor(float("nan"))}
    )


def test_check_interval(make_runner, run_iters):
    runner = make_runner(NonFiniteLossHook(check_interval=2), max_iters=4)
    run_iters(runner, outputs=_nan_at(2))  # iteration 3 is not checked
    runner = make_runner(NonFiniteLossHook(check_interval=2), max_iters=4)
    with pytest.raises(TrainingError, match="iteration 4"):
        run_iters(runner, outputs=_nan_at(3))


def test_warn(make_runner, run_iters):
    runner = make_runner(NonFiniteLossHook(policy="warn"), max_iters=4)
    run_iters(runner, outputs=_nan_at(1))
    assert any("Non-finite loss at iteration 2" in m for m in runner.messages)


class TwoParams(nn.Module):
    def __init__(self):
        super().__init__()
        self.good = nn.Parameter(torch.ones(2))
        self.bad = nn.Parameter(torch.ones(2))
        self.poison = False

    def forward(self, x):
        scale = torch.tensor(float("nan")) if self.poison else torch.tensor(1.0)
        return (self.good * x).sum() + (self.bad * x * scale).sum()


def _skip_runner(make_runner, **kw):
    model = TwoParams()
    logger = LoggerHook(interval=1, backends=[], progress_bar=False, plot=False)
    runner = make_runner(NonFiniteLossHook(policy="skip", **kw), logger, model=model, max_iters=6)
    runner.call_hook("before_run")
    return runner, model


def test_skip_leaves_weights_untouched(make_runner):
    runner, model = _skip_runner(make_runner)
    opt = runner.optim_wrapper.optimizer
    runner.call_hook("before_train")
    for i in range(3):
        model.poison = i == 1
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        runner.iter = i
        runner.call_hook("before_train_iter", batch_idx=i, data_batch=None)
        loss = model(torch.ones(2))
        loss.backward()
        runner.call_hook("after_backward")
        opt.step()
        opt.zero_grad()
        runner.call_hook(
            "after_train_iter", batch_idx=i, data_batch=None, outputs={"loss": loss.detach()}
        )
        changed = {n: not torch.equal(before[n], p) for n, p in model.named_parameters()}
        if i == 1:
            assert changed == {"good": False, "bad": False}  # the whole step was skipped
        else:
            assert changed == {"good": True, "bad": True}
    hook = runner.hooks[0]
    assert hook.skipped_total == 1 and hook.skipped_in_row == 0
    warning = next(m for m in runner.messages if "Non-finite gradients" in m)
    assert "iteration 2" in warning and "bad" in warning and "good" not in warning
    # the skipped step's NaN loss stayed out of the logged averages
    assert runner.message_hub.latest("train/loss") == pytest.approx(4.0, rel=1e-2)
    assert all("nan" not in m for m in runner.messages if m.startswith("Iter"))


def test_skip_gives_up_after_max_skips(make_runner):
    runner, model = _skip_runner(make_runner, max_skips=2)
    model.poison = True
    runner.call_hook("before_train")
    with pytest.raises(TrainingError, match="3 optimizer steps in a row"):
        for i in range(3):
            runner.iter = i
            model(torch.ones(2)).backward()
            runner.call_hook("after_backward")


def test_skip_defers_to_amp_scaler(make_runner):
    runner, model = _skip_runner(make_runner)
    runner.optim_wrapper.scaler = object()
    runner.call_hook("before_train")
    model.poison = True
    model(torch.ones(2)).backward()
    runner.call_hook("after_backward")
    assert model.bad.grad is not None  # left for the GradScaler to see


def test_options():
    with pytest.raises(ConfigError, match="Did you mean 'skip'"):
        NonFiniteLossHook(policy="skp")
    with pytest.raises(ConfigError, match="check_interval"):
        NonFiniteLossHook(check_interval=0)
