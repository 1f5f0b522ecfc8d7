"""The shape of graph mode and mixed precision: one owner each, composed, not bypassed.

GraphMode (libai/model/graph/) owns compiling, the parity check, the fallback and its record;
GraphModule and GraphOptimWrapper only ask it. Precision is a policy every optim wrapper holds;
GraphOptimWrapper is no AmpOptimWrapper. bfloat16 runs only on tiny tensors (slow on a CPU).
"""

import inspect
import re

import pytest
import torch
from torch import nn

import libai.optim.amp_optim_wrapper as amp_module
from libai.model.graph import GraphMode, GraphModule, graph_options
from libai.optim import (
    AmpOptimWrapper,
    GraphOptimWrapper,
    OptimWrapper,
    Precision,
    graph_optim_wrapper,
)
from libai.utils.errors import ConfigError

FP16_ON_CPU = amp_module._float16_supported("cpu")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _sgd(model=None):
    return torch.optim.SGD((model or nn.Linear(4, 2)).parameters(), lr=0.1)


def test_graph_optim_wrapper_holds_a_policy_instead_of_inheriting_amp():
    assert not issubclass(GraphOptimWrapper, AmpOptimWrapper)
    assert GraphOptimWrapper.__mro__[1] is OptimWrapper and AmpOptimWrapper.__mro__[1] is OptimWrapper
    source = inspect.getsource(graph_optim_wrapper)
    assert not re.search(r"\w+OptimWrapper\.\w+\(self", source)  # no Parent.method(self)
    assert not re.search(r"graph_mode\._\w", source)  # no private field of the owner
    # AmpOptimWrapper adds a policy and nothing to the step
    for name in ("optim_context", "_run_backward", "step", "scalars", "state_dict"):
        assert name not in vars(AmpOptimWrapper), name


def test_float32_policy_changes_nothing_and_keeps_the_fast_paths():
    wrapper = OptimWrapper(_sgd())
    policy = wrapper.precision
    assert isinstance(policy, Precision) and not policy.enabled and policy.scaler is None
    assert wrapper.plain_forward and wrapper._plain_steps
    assert policy.scalars() == {} and policy.state_dict() == {}
    assert not hasattr(wrapper, "scaler")  # hooks ask getattr(wrapper, "scaler", None)
    graph = GraphOptimWrapper(_sgd())
    assert graph.dtype is None and graph.scaler is None and not graph.precision.enabled
    with pytest.raises(ConfigError, match="takes a libai.optim.Precision"):
        OptimWrapper(_sgd(), precision="bfloat16")


@pytest.mark.parametrize("cls", [AmpOptimWrapper, GraphOptimWrapper])
def test_bfloat16_policy_autocasts_the_forward_only(cls):
    model = nn.Linear(4, 2)
    wrapper = cls(_sgd(model), dtype="bfloat16")
    assert wrapper.precision.dtype is torch.bfloat16 and wrapper.dtype is torch.bfloat16
    assert wrapper.scaler is None and not wrapper.plain_forward
    x = torch.randn(3, 4)
    with wrapper.optim_context(model):
        assert model(x).dtype == torch.bfloat16
    assert model(x).dtype == torch.float32
    assert "dtype=bfloat16" in repr(wrapper)
    with pytest.raises(ConfigError, match="Did you mean 'bfloat16'"):
        cls(_sgd(model), dtype="bfloat61")


def test_precision_context_keeps_the_inner_context():
    entered = []

    class Inner:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc):
            entered.append(False)

    model = nn.Linear(4, 2)
    with Precision(torch.bfloat16).context(model, Inner()):
        assert entered == [True] and torch.is_autocast_enabled("cpu")
    assert entered == [True, False]
    inner = Inner()
    assert Precision().context(model, inner) is inner


@pytest.mark.skipif(not FP16_ON_CPU, reason="this torch build has no float16 autocast on CPU")
def test_float16_scaler_state_loads_across_the_wrappers():
    model = nn.Linear(4, 2)
    amp = AmpOptimWrapper(_sgd(model), dtype="float16", loss_scale=dict(init_scale=64.0))
    assert amp.scaler is amp.precision.scaler and not amp._plain_steps
    state = amp.state_dict()
    assert state["loss_scaler"]["scale"] == 64.0
    graph = GraphOptimWrapper(_sgd(model), dtype="float16")
    graph.load_state_dict(state)
    assert graph.scalars()["loss_scale"] == 64.0
    assert set(graph.state_dict()) == set(state)


def test_graph_options_is_the_one_switch():
    graph = dict(type="GraphOptimWrapper", optimizer=dict(type="SGD", lr=0.1), on_failure="raise")
    options = graph_options(dict(optim_wrapper=graph))
    assert options["on_failure"] == "raise" and options["compile"]["options"]["fallback_random"]
    assert graph_options(dict(optim_wrapper=dict(type="AmpOptimWrapper", dtype="bfloat16"))) is None
    assert graph_options(dict(optim_wrapper=None)) is None
    built = GraphOptimWrapper(_sgd(), compile=dict(backend="eager"))
    assert graph_options(dict(optim_wrapper=built))["compile"] == {"backend": "eager"}
    with pytest.raises(ConfigError, match="both ask for graph mode"):
        graph_options(dict(optim_wrapper=graph, compile=True))


class TinyRegression(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, x, y):
        return ((self.net(x) - y) ** 2).mean()  # the loss, as the model contract allows


def test_graph_state_lives_in_one_object(libai_log):
    torch.manual_seed(0)
    model = TinyRegression()
    wrapper = GraphOptimWrapper(_sgd(model), compile=dict(backend="eager"), verify_steps=1)
    own = wrapper.graph_mode
    forward = GraphModule(model, compile=wrapper.compile_options)
    wrapper.bind_model(forward)
    mode = forward.graph_mode
    assert isinstance(mode, GraphMode) and wrapper.graph_mode is mode and own is not mode
    assert mode.verify_steps == 1 and mode.module is model
    wrapper.initialize_count_status(model, 0, 3)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(2):
        wrapper.update_params(forward(x, y))
    assert mode.train_calls == forward.train_calls == 2 and wrapper._update_compiled
    assert "Graph mode parity check, step 1" in "\n".join(libai_log)
    # neither face keeps graph state of its own
    for name in ("eager", "failure", "verify_steps", "_replay", "_reference", "train_calls"):
        assert name not in vars(forward) and name not in forward.__dict__.get("_modules", {})
    assert not {"eager", "failure", "_replay", "_reference", "_eager"} & set(vars(wrapper))
    mode.failed(RuntimeError("a compiler bug"), "the optimizer update")
    assert forward.eager and wrapper.eager and mode.failure.startswith("the optimizer update")
    assert forward.report().startswith("Graph mode: eager since the optimizer update")
    wrapper.update_params(forward(x, y))  # eager now, float learning rates
    assert isinstance(wrapper.param_groups[0]["lr"], float)


def test_the_first_compile_is_announced_before_the_wait(libai_log):
    """A cold compile is a quiet minute on a CPU: a line says so before it starts (issue 27)."""
    torch.manual_seed(0)
    model = TinyRegression()
    forward = GraphModule(model, compile=dict(backend="eager"))
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    forward(x, y).backward()
    forward(x, y)
    with torch.no_grad():
        forward.eval()
        forward(x, y)
    announced = [m for m in libai_log if m.startswith("Graph mode: compiling")]
    assert len(announced) == 2 and "training step" in announced[0] and "20-70 s" in announced[0]
    assert "evaluation forward" in announced[1]


def test_the_end_of_the_first_compile_says_how_long_it_took(libai_log):
    """The announced wait ends with one line: the first step's time in all, then its parts."""
    torch.manual_seed(0)
    model = TinyRegression()
    wrapper = GraphOptimWrapper(_sgd(model), compile=dict(backend="eager"))
    forward = GraphModule(model, compile=wrapper.compile_options)
    wrapper.bind_model(forward)
    wrapper.initialize_count_status(model, 0, 3)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for _ in range(2):
        wrapper.update_params(forward(x, y))
    done = [m for m in libai_log if m.startswith("Graph mode: the training step is compiled")]
    assert len(done) == 1, libai_log
    total, fwd, rest = map(float, re.findall(r"([\d.]+) s", done[0].splitlines()[0])[:3])
    # tenths of a second: a backend='eager' forward can compile in under 0.05 s ("0.0 s")
    assert min(fwd, rest) >= 0 and abs(total - (fwd + rest)) <= 0.11
    assert "the update (clipping, optimizer step) compiled in" in done[0]
