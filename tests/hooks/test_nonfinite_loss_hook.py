import os

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


def test_every_iteration_is_checked_in_batches(make_runner, run_iters):
    runner = make_runner(NonFiniteLossHook(check_interval=4), max_iters=8)
    with pytest.raises(TrainingError, match="iteration 2:") as e:
        run_iters(runner, outputs=_nan_at(1))
    assert runner.iter == 3  # read at the end of the 4th iteration, naming the 2nd
    assert "loss=nan" in str(e.value)


def test_checks_sit_on_multiples_of_the_interval(make_runner, run_iters):
    runner = make_runner(NonFiniteLossHook(check_interval=4), max_iters=12)
    runner.iter = 2  # resumed: the first batch ends at iteration 4, not 6
    with pytest.raises(TrainingError, match="iteration 3:"):
        run_iters(runner, outputs=_nan_at(2))
    assert runner.iter == 3


def test_a_bad_loss_is_reported_before_a_checkpoint_saves_its_weights(make_runner, run_iters):
    from libai.hooks import CheckpointHook

    runner = make_runner(NonFiniteLossHook(), CheckpointHook(interval=3, save_last=False),
                         max_iters=10)
    with pytest.raises(TrainingError, match="iteration 2:"):
        run_iters(runner, outputs=_nan_at(1))
    assert runner.iter == 2  # stopped by the save at the end of iteration 3
    assert not os.path.exists(os.path.join(runner.work_dir, "iter_3.pth"))


def test_a_bad_loss_is_reported_before_validation_and_at_the_end(make_runner, run_iters):
    runner = make_runner(NonFiniteLossHook(), max_iters=10)
    with pytest.raises(TrainingError, match="iteration 2:"):
        run_iters(runner, outputs=_nan_at(1), validate=lambda done: {"acc": 1.0} if done == 3 else None)
    assert runner.iter == 3  # the validation after iteration 3 never started
    runner = make_runner(NonFiniteLossHook(), max_iters=3)
    with pytest.raises(TrainingError, match="iteration 3:"):
        run_iters(runner, outputs=_nan_at(2))


def test_warn(make_runner, run_iters):
    runner = make_runner(NonFiniteLossHook(policy="warn"), max_iters=4)
    run_iters(runner, outputs=lambda i: {"loss": torch.tensor(float("nan") if i in (1, 2) else 1.0)})
    warnings = [m for m in runner.messages if "Non-finite" in m]
    assert len(warnings) == 1 and "at iteration 2: loss=nan (1 more up to iteration 4)" in warnings[0]


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


def one_iteration(runner, model, i, poison):
    """One hand-written step of ``model`` (NaN in ``bad`` if ``poison``) between the hooks."""
    opt = runner.optim_wrapper.optimizer
    model.poison = poison
    runner.iter = i
    runner.call_hook("before_train_iter", batch_idx=i, data_batch=None)
    loss = model(torch.ones(2))
    loss.backward()
    runner.call_hook("after_backward")
    opt.step()
    opt.zero_grad()
    runner.call_hook("after_train_iter", batch_idx=i, data_batch=None,
                     outputs={"loss": loss.detach()})
    return float(loss.detach())


def test_skip_leaves_weights_untouched(make_runner):
    runner, model = _skip_runner(make_runner)
    runner.call_hook("before_train")
    for i in range(3):
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        one_iteration(runner, model, i, poison=i == 1)
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
