"""The default steps (libai.model.steps): parse_losses, to_device, unwrap_model, BaseModel steps."""

from collections import namedtuple

import pytest
import torch
from torch import nn

from libai.model import (
    BaseModel,
    make_train_step,
    parse_losses,
    to_device,
    train_step,
    unwrap_model,
)
from libai.optim import OptimWrapper
from libai.utils.errors import TrainingError


def test_parse_losses_sums_loss_entries_and_logs_all():
    w = torch.ones(2, requires_grad=True)
    out = {"loss_cls": (w * 2).sum(), "loss_box": (w * 3).mean(), "acc": torch.tensor(0.5),
           "note": "text", "loss_parts": [w.sum(), w.sum() * 2]}
    loss, logs = parse_losses(out)
    assert loss.item() == pytest.approx(4.0 + 3.0 + 6.0)
    assert set(logs) == {"loss_cls", "loss_box", "acc", "loss_parts", "loss"}
    assert logs["loss"].item() == pytest.approx(13.0)
    assert not any(v.requires_grad for v in logs.values())  # nothing keeps the graph alive
    loss.backward()
    assert w.grad.tolist() == pytest.approx([2 + 1.5 + 3, 2 + 1.5 + 3])


def test_parse_losses_tensor_and_vector_loss():
    loss, logs = parse_losses(torch.tensor([1.0, 3.0]))
    assert loss.item() == 2.0 and logs["loss"].item() == 2.0
    loss, logs = parse_losses({"loss": torch.tensor([2.0, 4.0])})
    assert loss.item() == 3.0


def test_parse_losses_single_named_loss_is_detached():
    w = torch.ones(2, requires_grad=True)
    loss, logs = parse_losses({"loss_ce": (w * 2).sum()})
    assert loss.requires_grad and set(logs) == {"loss_ce", "loss"}
    assert not any(v.requires_grad for v in logs.values()) and logs["loss"].item() == 4.0


def _net(outputs):
    """A module with one parameter ``w`` (3.0) whose forward returns ``outputs(w)``."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.tensor(3.0))

        def forward(self, batch):
            return outputs(self.w)

    return Net()


@pytest.mark.parametrize("kind", ["graph", "named", "view", "leaf"])
def test_train_step_logs_detached_losses_and_leaves_parameters_alone(kind):
    """Whatever the loss is (a graph output, a view, the parameter itself), the logged values
    are detached and the parameters stay trainable."""
    def outputs(w):
        if kind == "leaf":  # the loss is the parameter itself
            return {"loss": w}
        two = torch.stack([w * 2, w * 3])
        if kind == "view":
            return {"loss": two[0], "aux": two}
        return {"loss_ce" if kind == "named" else "loss": two.sum(), "aux": two}

    model = _net(outputs)
    w = model.w
    logs = train_step(model, {}, OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.0)))
    assert all(not v.requires_grad and v.grad_fn is None for v in logs.values())
    assert logs["loss"].item() == {"leaf": 3.0, "view": 6.0}.get(kind, 15.0)
    if kind == "named":
        assert logs["loss_ce"].item() == logs["loss"].item()
    assert w.requires_grad and w.grad is None  # zeroed after the step, still trainable
    logs2 = train_step(model, {}, OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.0)))
    assert logs2["loss"].item() == logs["loss"].item()


_OUTPUTS = {
    "loss": lambda w: {"loss": w * 2},
    "loss+acc": lambda w: {"loss": w * 2, "acc": torch.tensor(0.5)},
    "aux with grad": lambda w: {"loss": w * 2, "aux": w * 3},
    "vector loss": lambda w: {"loss": torch.stack([w, w * 3])},
    "two losses": lambda w: {"loss": w * 2, "loss_aux": w + 1},
    "one named loss": lambda w: {"loss_ce": w * 2, "acc": torch.tensor(1.0)},
    "text entry": lambda w: {"loss": w * 2, "note": "text"},
    "tensor": lambda w: w * 2,
}


@pytest.mark.parametrize("kind", sorted(_OUTPUTS))
def test_train_step_parses_like_parse_losses(kind):
    """The default step parses the usual outputs inline: the same loss and logged values as
    parse_losses for every shape of output."""
    class Capture:
        plain_forward, accumulative_counts = True, 1

        def update_params(self, loss):
            self.loss = loss

    model, capture = _net(_OUTPUTS[kind]), Capture()
    logs = make_train_step(model)({}, capture)
    loss, expected = parse_losses(model({}))
    assert capture.loss.requires_grad and capture.loss.item() == loss.item()
    assert logs.keys() == expected.keys()
    for key, value in logs.items():
        assert value.item() == expected[key].item() and not value.requires_grad, key


def test_train_step_without_a_loss_says_what_to_return():
    class Net(nn.Module):
        def forward(self, batch):
            return {"logits": torch.zeros(())}

    with pytest.raises(TrainingError, match="none of which contains 'loss'"):
        train_step(Net(), {}, OptimWrapper(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)))


def test_parse_losses_errors_say_what_to_return():
    with pytest.raises(TrainingError, match="none of which contains 'loss'"):
        parse_losses({"logits": torch.zeros(2)})
    with pytest.raises(TrainingError, match="must return a loss tensor or a dict"):
        parse_losses([torch.tensor(1.0)])


def test_to_device_walks_nested_containers():
    Pair = namedtuple("Pair", "a b")
    data = {"x": torch.zeros(1), "nested": [torch.ones(1), (torch.ones(2), "s")], "p": Pair(torch.zeros(1), 3)}
    out = to_device(data, torch.device("cpu"))
    assert isinstance(out["p"], Pair) and out["p"].b == 3
    assert out["nested"][1][1] == "s" and torch.equal(out["nested"][1][0], torch.ones(2))


def test_unwrap_model_strips_compile_wrapper():
    model = nn.Linear(2, 2)
    compiled = torch.compile(model, backend="aot_eager")  # lazy: nothing is compiled here
    assert unwrap_model(compiled) is model and unwrap_model(model) is model


class TwoLossNet(BaseModel):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def forward(self, batch):
        return {"loss": self.lin(batch["x"]).pow(2).mean()}


def test_base_model_train_step_calls_forward_wrapper():
    model = TwoLossNet()
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1))
    calls = []

    class Spy(nn.Module):  # stands in for DDP: train_step must call it, not the model itself
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, batch):
            calls.append(1)
            return self.inner(batch)

    before = model.lin.weight.detach().clone()
    logs = model.train_step({"x": torch.ones(4, 3)}, wrapper, forward=Spy(model))
    assert calls == [1] and "loss" in logs
    assert not torch.equal(before, model.lin.weight)


def test_default_train_step_equals_a_hand_step():
    torch.manual_seed(0)
    a, b = nn.Linear(3, 1), nn.Linear(3, 1)
    b.load_state_dict(a.state_dict())

    def fwd(m):
        return lambda batch: m(batch["x"]).pow(2).mean()

    class Wrap(nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, batch):
            return fwd(self.m)(batch)

    batch = {"x": torch.randn(5, 3)}
    train_step(a, batch, OptimWrapper(torch.optim.SGD(a.parameters(), lr=0.1)), forward=Wrap(a))
    opt = torch.optim.SGD(b.parameters(), lr=0.1)
    fwd(b)(batch).backward()
    opt.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
