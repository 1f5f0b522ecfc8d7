import pytest
import torch
from torch import nn

from libai.hooks import EMAHook
from libai.utils.errors import CheckpointError, ConfigError


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_ema_matches_hand_computation(make_runner, run_iters):
    torch.manual_seed(0)
    m = 0.25
    hook = EMAHook(momentum=m)
    runner = make_runner(hook, max_iters=4)
    model = runner.unwrapped_model
    weights = []  # the weights after each optimizer step

    def outputs(i):
        weights.append(_snapshot(model))
        return {"loss": torch.tensor(0.0)}

    run_iters(runner, outputs=outputs, step=True)
    expected = weights[0]  # starts as a copy after iteration begin_iter=0
    for w in weights[1:]:
        expected = {k: (1 - m) * expected[k] + m * w[k] for k in expected}
    state = hook.state_dict()
    assert set(state) == {"weight", "bias"}
    for k in expected:
        torch.testing.assert_close(state[k], expected[k], rtol=0, atol=1e-7)


def test_begin_iter(make_runner, run_iters):
    hook = EMAHook(momentum=0.5, begin_iter=2)
    runner = make_runner(hook, max_iters=2)
    run_iters(runner, step=True)
    assert hook.state_dict() == {}  # not started: nothing saved, nothing swapped
    w = _snapshot(runner.unwrapped_model)
    hook.before_val_epoch(runner)
    assert all(torch.equal(v, runner.unwrapped_model.state_dict()[k]) for k, v in w.items())
    hook.after_val_epoch(runner, metrics={})
    runner.train_loop.max_iters = 3
    run_iters(runner, step=True)
    assert set(hook.state_dict()) == {"weight", "bias"}


def test_swap_and_restore_are_exact(make_runner, run_iters, run_val):
    hook = EMAHook(momentum=0.1)
    runner = make_runner(hook, max_iters=5)
    run_iters(runner, step=True)
    model = runner.unwrapped_model
    trained = _snapshot(model)
    ema = {k: v.clone() for k, v in hook.state_dict().items()}
    params_before = [id(p) for p in model.parameters()]
    ptrs_before = [p.data_ptr() for p in model.parameters()]
    seen = {}

    class Probe:
        def after_val_iter(self, runner, batch_idx, data_batch, outputs):
            seen.update(_snapshot(runner.unwrapped_model))

    runner.hooks = [hook]
    hook.before_val_epoch(runner)
    Probe().after_val_iter(runner, 0, None, None)
    hook.after_val_epoch(runner, metrics={})
    for k in ema:
        assert torch.equal(seen[k], ema[k])  # validation saw the average
        assert torch.equal(model.state_dict()[k], trained[k])  # and the weights came back
    # swapped in place: same parameter objects and storage
    assert [id(p) for p in model.parameters()] == params_before
    assert [p.data_ptr() for p in model.parameters()] == ptrs_before
    # a state taken while swapped in is still the average
    hook.before_test_epoch(runner)
    for k in ema:
        assert torch.equal(hook.state_dict()[k], ema[k])
    hook.after_test_epoch(runner, metrics={})
    assert torch.equal(model.weight, trained["weight"])


def test_state_round_trip_is_exact(make_runner, run_iters, tmp_path):
    hook = EMAHook(momentum=0.3)
    runner = make_runner(hook, max_iters=3)
    run_iters(runner, step=True)
    path = tmp_path / "ema.pt"
    torch.save(hook.state_dict(), path)
    saved = torch.load(path)
    assert all(isinstance(v, torch.Tensor) for v in saved.values())

    # a new hook on a new runner with the same model weights, resumed: state arrives first
    resumed = EMAHook(momentum=0.3)
    runner2 = make_runner(resumed, max_iters=6)
    runner2.unwrapped_model.load_state_dict(runner.unwrapped_model.state_dict())
    runner2.optim_wrapper.optimizer.load_state_dict(runner.optim_wrapper.optimizer.state_dict())
    resumed.load_state_dict(saved)
    resumed.after_load_checkpoint(runner2, checkpoint={})
    runner2.iter = 3
    for k, v in resumed_state(resumed, runner2).items():
        assert torch.equal(v, saved[k])
    # both continue identically
    runner.train_loop.max_iters = 6
    run_iters(runner, step=True)
    run_iters(runner2, step=True)
    for k, v in hook.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k])


def resumed_state(hook, runner):
    hook.before_train(runner)
    return hook.state_dict()


def test_weights_only_load_restarts_average(make_runner, run_iters):
    hook = EMAHook(momentum=0.5)
    runner = make_runner(hook, max_iters=3)
    run_iters(runner, step=True)
    with torch.no_grad():
        runner.unwrapped_model.weight.fill_(7.0)
    hook.after_load_checkpoint(runner, checkpoint={})  # a checkpoint without EMA state
    assert torch.all(hook.state_dict()["weight"] == 7.0)


def test_update_buffers():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    hook = EMAHook(momentum=0.5, update_buffers=True)
    runner = type("R", (), {"unwrapped_model": model, "iter": 0})()
    hook.after_train_iter(runner, 0)
    with torch.no_grad():
        model[1].running_mean.fill_(2.0)
    runner.iter = 1
    hook.after_train_iter(runner, 1)
    state = hook.state_dict()
    assert "1.running_mean" in state and "1.num_batches_tracked" not in state
    torch.testing.assert_close(state["1.running_mean"], torch.full((2,), 1.0))


def test_load_mismatch_and_options(make_runner, run_iters):
    hook = EMAHook()
    runner = make_runner(hook, max_iters=1)
    run_iters(runner, step=True)
    with pytest.raises(CheckpointError, match="missing"):
        hook.load_state_dict({"weight": torch.zeros(1, 2)})
    with pytest.raises(CheckpointError, match="shape"):
        hook.load_state_dict({"weight": torch.zeros(3, 3), "bias": torch.zeros(1)})
    with pytest.raises(ConfigError, match="momentum"):
        EMAHook(momentum=1.5)
