"""OptimWrapper: accumulation, clipping, callbacks, no_sync and state."""

from __future__ import annotations

import contextlib
import copy
import warnings

import pytest
import torch
from torch import nn

from libai.optim import OptimWrapper
from libai.utils.errors import ConfigError

K, B = 4, 3  # micro-batches per window, micro-batch size


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 1)).double()


def _data(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 5, generator=g, dtype=torch.float64), torch.randn(
        n, 1, generator=g, dtype=torch.float64
    )


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((model(x) - y) ** 2).mean()


def _train_accumulated(window_sizes, max_counts=None, optim=torch.optim.SGD, **opt_kw):
    """Micro-batches of size B through a wrapper with accumulative_counts=K."""
    model = _model()
    wrapper = OptimWrapper(optim(model.parameters(), **opt_kw), accumulative_counts=K)
    n_micro = sum(window_sizes)
    if max_counts is not None:
        wrapper.initialize_count_status(model, 0, max_counts)
    x, y = _data(n_micro * B)
    for i in range(n_micro):
        with wrapper.optim_context(model):
            loss = _loss(model, x[i * B : (i + 1) * B], y[i * B : (i + 1) * B])
        wrapper.update_params(loss)
    return model


def _train_big_batches(window_sizes, optim=torch.optim.SGD, **opt_kw):
    """One optimizer step per window over the window's samples, mean loss."""
    model = _model()
    opt = optim(model.parameters(), **opt_kw)
    x, y = _data(sum(window_sizes) * B)
    start = 0
    for size in window_sizes:
        stop = start + size * B
        opt.zero_grad()
        _loss(model, x[start:stop], y[start:stop]).backward()
        opt.step()
        start = stop
    return model


def _assert_same_params(a: nn.Module, b: nn.Module) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14, msg=name)


def test_accumulation_equals_large_batch():
    opt_kw = dict(lr=0.1, momentum=0.9)
    got = _train_accumulated([K, K, K], **opt_kw)
    _assert_same_params(got, _train_big_batches([K, K, K], **opt_kw))
    # and it really trained
    assert not torch.equal(got[0].weight, _model()[0].weight)


def test_last_short_window_uses_its_own_size():
    # max_counts=10, K=4: windows 4, 4, 2; the last two losses are divided by 2
    got = _train_accumulated([4, 4, 2], max_counts=10, lr=0.1)
    _assert_same_params(got, _train_big_batches([4, 4, 2], lr=0.1))


def test_step_and_divisor_schedule():
    model = nn.Linear(2, 1)
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1), accumulative_counts=4)
    wrapper.initialize_count_status(model, 0, 10)
    steps, divisors = [], []
    wrapper.optimizer.step = lambda **kw: steps.append(wrapper.inner_count)
    for _ in range(10):
        divisors.append(wrapper._divisor(wrapper.inner_count))
        wrapper.update_params(model(torch.ones(1, 2)).sum())
    assert steps == [4, 8, 10]  # inner_count after each window's last update
    assert divisors == [4] * 8 + [2, 2]


def test_after_backward_callbacks_run_once_per_backward_before_step():
    model = nn.Linear(2, 1)
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1), accumulative_counts=2)
    events = []
    real_step = wrapper.optimizer.step

    def step(**kw):
        events.append("step")
        real_step(**kw)

    wrapper.optimizer.step = step
    wrapper.register_after_backward(lambda: events.append(("cb", model.weight.grad is not None)))
    for _ in range(4):
        wrapper.update_params(model(torch.ones(1, 2)).sum())
    cb = ("cb", True)
    assert events == [cb, cb, "step", cb, cb, "step"]


def _clip_case(clip_grad: dict) -> tuple[torch.Tensor, OptimWrapper]:
    w = nn.Parameter(torch.zeros(2))
    wrapper = OptimWrapper(torch.optim.SGD([w], lr=1.0), clip_grad=clip_grad)
    wrapper.update_params((w * torch.tensor([3.0, 4.0])).sum())  # grad (3, 4), norm 5
    return w, wrapper


def test_clip_by_norm_records_grad_norm():
    w, wrapper = _clip_case(dict(type="norm", max_norm=1.0, norm_type=2))
    torch.testing.assert_close(w.detach(), torch.tensor([-0.6, -0.8]))
    assert isinstance(wrapper._grad_norm, torch.Tensor)  # no sync until scalars()
    assert wrapper.scalars() == {"grad_norm": pytest.approx(5.0)}


def test_clip_by_value():
    w, wrapper = _clip_case(dict(type="value", clip_value=0.5))
    torch.testing.assert_close(w.detach(), torch.tensor([-0.5, -0.5]))
    assert wrapper.scalars() == {}


def test_no_clip_no_scalars():
    w, wrapper = _clip_case(None)
    torch.testing.assert_close(w.detach(), torch.tensor([-3.0, -4.0]))
    assert wrapper.scalars() == {}


@pytest.mark.parametrize(
    "clip_grad, match",
    [
        (dict(type="nrom", max_norm=1.0), "Did you mean 'norm'"),
        (dict(type="value"), "clip_value"),
        (dict(type="norm", max_nrom=1.0), "Did you mean 'max_norm'"),
        ("norm", "must be a dict"),
    ],
)
def test_bad_clip_grad(clip_grad, match):
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ConfigError, match=match):
        OptimWrapper(opt, clip_grad=clip_grad)


def test_bad_accumulative_counts():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ConfigError, match="accumulative_counts"):
        OptimWrapper(opt, accumulative_counts=0)


class _FakeDDP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 1)
        self.no_sync_entered = 0

    @contextlib.contextmanager
    def no_sync(self):
        self.no_sync_entered += 1
        yield

    def forward(self, x):
        return self.inner(x)


def test_optim_context_uses_no_sync_while_accumulating():
    model = _FakeDDP()
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1), accumulative_counts=3)
    wrapper.initialize_count_status(model, 0, 5)  # windows 3, 2
    entered = []
    for _ in range(5):
        before = model.no_sync_entered
        with wrapper.optim_context(model):
            loss = model(torch.ones(1, 2)).sum()
        entered.append(model.no_sync_entered - before)
        wrapper.update_params(loss)
    assert entered == [1, 1, 0, 1, 0]


def test_lr_momentum_and_param_groups():
    p1, p2 = nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([{"params": [p1]}, {"params": [p2], "lr": 0.5}], lr=0.1, momentum=0.9)
    wrapper = OptimWrapper(opt)
    assert wrapper.get_lr() == {"lr": [0.1, 0.5]}
    assert wrapper.get_momentum() == {"momentum": [0.9, 0.9]}
    assert wrapper.param_groups is opt.param_groups


def _wrapper_and_model(k: int = 3) -> tuple[nn.Module, OptimWrapper]:
    model = _model()
    return model, OptimWrapper(torch.optim.Adam(model.parameters(), lr=0.01), accumulative_counts=k)


def _run(model: nn.Module, wrapper: OptimWrapper, start: int, stop: int) -> None:
    x, y = _data(20 * B)
    for i in range(start, stop):
        wrapper.update_params(_loss(model, x[i * B : (i + 1) * B], y[i * B : (i + 1) * B]))


def test_state_dict_round_trip_mid_window_is_exact():
    model, wrapper = _wrapper_and_model()
    wrapper.initialize_count_status(model, 0, 11)
    _run(model, wrapper, 0, 5)  # one full window and 2 of the next
    state = copy.deepcopy(wrapper.state_dict())
    assert state["inner_count"] == 5 and "accumulated_grads" in state
    resumed_model = copy.deepcopy(model)
    _run(model, wrapper, 5, 11)

    resumed_model.zero_grad(set_to_none=True)
    resumed = OptimWrapper(
        torch.optim.Adam(resumed_model.parameters(), lr=0.01), accumulative_counts=3
    )
    resumed.load_state_dict(state)
    assert resumed.inner_count == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "gradients lost" warning: they were restored
        resumed.initialize_count_status(resumed_model, 5, 11)
    _run(resumed_model, resumed, 5, 11)
    _assert_same_params(model, resumed_model)


def test_state_dict_at_window_boundary_has_no_grads():
    model, wrapper = _wrapper_and_model()
    _run(model, wrapper, 0, 3)
    state = wrapper.state_dict()
    assert state["inner_count"] == 3 and "accumulated_grads" not in state
    assert set(state) == {"optimizer", "inner_count", "grad_norm"}


def test_load_plain_optimizer_state_dict_and_resume_warning():
    model, wrapper = _wrapper_and_model()
    _run(model, wrapper, 0, 3)
    other_model, other = _wrapper_and_model()
    other.load_state_dict(wrapper.optimizer.state_dict())
    assert (
        other.optimizer.state_dict()["state"].keys()
        == wrapper.optimizer.state_dict()["state"].keys()
    )
    with pytest.warns(UserWarning, match="inside a gradient accumulation window"):
        other.initialize_count_status(other_model, 4, 10)


def _one_update(wrapper: OptimWrapper, model: nn.Module) -> None:
    x, y = _data(B)
    wrapper.update_params(_loss(model, x, y))


def test_zero_grad_resets_to_none_and_matches_torch():
    """The wrapper resets gradients itself (cheaper than torch's zero_grad): same parameters
    as a loop calling ``optimizer.zero_grad()``, and every ``.grad`` is None afterwards."""
    model, ref = _model(), _model()
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    x, y = _data(5 * B)
    for i in range(5):
        wrapper.update_params(_loss(model, x[i * B:(i + 1) * B], y[i * B:(i + 1) * B]))
        _loss(ref, x[i * B:(i + 1) * B], y[i * B:(i + 1) * B]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        assert all(p.grad is None for p in model.parameters())
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p, q)
    _loss(model, *_data(B)).backward()
    wrapper.zero_grad(set_to_none=False)  # asked for zeros: torch's own zero_grad does it
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def test_zero_grad_defers_to_an_overriding_optimizer():
    calls = []

    class Counting(torch.optim.SGD):
        def zero_grad(self, set_to_none: bool = True) -> None:
            calls.append(set_to_none)
            super().zero_grad(set_to_none)

    model = _model()
    _one_update(OptimWrapper(Counting(model.parameters(), lr=0.1)), model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt.zero_grad = lambda set_to_none=True: calls.append("instance")  # patched on the object
    _one_update(OptimWrapper(opt), model)
    assert calls == [True, "instance"]
    assert all(p.grad is not None for p in model.parameters())  # the patch did not reset them


def test_zero_grad_keeps_torch_profiler_label():
    model = _model()
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _one_update(wrapper, model)
    assert any("zero_grad" in e.name for e in prof.events())
    assert all(p.grad is None for p in model.parameters())
