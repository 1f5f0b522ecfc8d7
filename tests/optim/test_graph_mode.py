"""Graph mode: GraphOptimWrapper + GraphModule equal eager within tolerance, and the guard rails.

torch.compile is slow to start on this CPU (seconds per graph, more when the on-disk cache is
cold), so the models are tiny, each test compiles few graphs, and every test compiles with
``aot_eager`` (dynamo and AOT autograd: the graphs, guards, recompiles and fallbacks graph mode
owns) except one: the digits MLP with inductor (generated kernels, dropout drawn as eager draws
it: ``exact_random``), 25 s with a cold compile cache; the tiny BERT takes 55 s there.
"""

import os
import re

import pytest
import torch
from torch import nn
from torch._dynamo.backends.common import aot_autograd

from libai.model import DigitsMLP, make_train_step
from libai.model.graph import GraphModeError, GraphModule
from libai.optim import (
    AmpOptimWrapper,
    GraphOptimWrapper,
    OptimWrapper,
    apply_schedulers,
    build_param_schedulers,
)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()  # every test compiles from its own cache entries
    yield
    torch._dynamo.reset()


def digits_batches(n, sizes=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    sizes = sizes or [16] * n
    return [dict(inputs=torch.randn(b, 64, generator=g), labels=torch.randint(0, 10, (b,), generator=g))
            for b in sizes]


def train(make_model, batches, graph, dtype=None, common=None, backend="aot_eager", **graph_kw):
    """Train on ``batches`` with a cosine schedule (a new lr every step); eager or graph (with
    ``backend`` unless ``compile`` names one)."""
    torch.manual_seed(0)
    graph_kw["compile"] = {"backend": backend, **graph_kw.get("compile", {})}
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    common = common or {}
    if graph:
        wrapper = GraphOptimWrapper(opt, dtype=dtype, **common, **graph_kw)
        forward = GraphModule(model, compile=wrapper.compile_options, on_failure=wrapper.on_failure)
        wrapper.bind_model(forward)
    else:
        forward = model
        wrapper = AmpOptimWrapper(opt, dtype=dtype, **common) if dtype else OptimWrapper(opt, **common)
    schedulers = build_param_schedulers([dict(type="CosineAnnealingLR", eta_min=1e-4)], opt,
                                        max_iters=len(batches))
    wrapper.initialize_count_status(model, 0, len(batches))
    step = make_train_step(model, forward)
    losses = []
    for t, batch in enumerate(batches):
        apply_schedulers(opt, schedulers, t)
        losses.append(float(step(batch, wrapper)["loss"]))
    return model, losses, forward, wrapper


CASES = {
    "plain": dict(),
    "accumulate2_clip": dict(common=dict(accumulative_counts=2, clip_grad=dict(type="norm", max_norm=0.5))),
    "bf16": dict(dtype="bfloat16"),
}


@pytest.mark.parametrize("case", ["plain", "accumulate2_clip", "bf16"])
def test_graph_equals_eager_digits_mlp(case, libai_log):
    """Dropout on, lr changing every step, 6 steps; aot_eager. The inductor build of the same
    step (its kernels, dropout drawn as eager draws it, the compiled update with accumulation
    and clipping): tests/tools/test_graph_cli.py, the suite's one inductor test."""
    check_graph_equals_eager_digits_mlp(case, "aot_eager", libai_log)


def check_graph_equals_eager_digits_mlp(case, backend, libai_log):
    batches = digits_batches(6)
    eager, eager_losses, _, _ = train(DigitsMLP, batches, graph=False, **CASES[case])
    graph, graph_losses, forward, wrapper = train(DigitsMLP, batches, graph=True, backend=backend,
                                                  **CASES[case])
    rtol = 2e-2 if case == "bf16" else 1e-4
    torch.testing.assert_close(graph_losses, eager_losses, rtol=rtol, atol=1e-5)
    for (name, p), q in zip(eager.named_parameters(), graph.parameters()):
        if case == "bf16":  # AdamW moves a weight whose bf16 gradient rounds the other way by lr
            assert (q - p).abs().mean() < 1e-3, name
        else:
            torch.testing.assert_close(q, p, rtol=rtol, atol=1e-6, msg=name)
    assert not forward.eager and wrapper._update_compiled
    assert forward.training_recompiles == 0  # a new lr every step is new data, not a new graph
    log = "\n".join(libai_log)
    assert "Graph mode parity check, step 1" in log and "equal within rtol" in log
    # the line that ends the announced wait, with what the first step took (issue 27)
    assert re.search(r"Graph mode: the training step is compiled: its first call took [\d.]+ s "
                     r"\(forward [\d.]+ s, backward and update [\d.]+ s\); \d+ graph break", log)
    assert "the update (clipping, optimizer step) compiled" in log
    if case == "accumulate2_clip":
        assert wrapper.scalars()["grad_norm"] > 0


class Chatty(DigitsMLP):
    def forward(self, batch):
        print("a side effect dynamo cannot put in a graph")
        return super().forward(batch)


def test_compile_failure_falls_back_to_eager_with_one_warning(libai_log):
    batches = digits_batches(3)
    _, eager_losses, _, _ = train(DigitsMLP, batches, graph=False)
    _, losses, forward, wrapper = train(Chatty, batches, graph=True, compile=dict(fullgraph=True))
    assert forward.eager and wrapper.eager
    assert losses == eager_losses  # eager from the first step on: the same numbers
    warnings = [line for line in "\n".join(libai_log).splitlines() if "torch.compile failed" in line]
    assert len(warnings) == 1
    assert "failed on the forward of Chatty (Unsupported" in warnings[0]
    assert "training continues in eager mode" in warnings[0]


def test_compile_failure_raises_when_asked():
    with pytest.raises(GraphModeError, match="torch.compile failed on the forward of Chatty") as exc:
        train(Chatty, digits_batches(1), graph=True, compile=dict(fullgraph=True), on_failure="raise")
    assert "on_failure='eager'" in str(exc.value)


def test_backward_that_fails_to_compile_falls_back_for_the_same_step(libai_log):
    def no_backward(gm, example_inputs):
        raise RuntimeError("no backward compiler here")

    backend = aot_autograd(fw_compiler=lambda gm, example_inputs: gm, bw_compiler=no_backward)
    batches = digits_batches(3)
    _, eager_losses, _, _ = train(DigitsMLP, batches, graph=False)
    model, losses, forward, _ = train(DigitsMLP, batches, graph=True, compile=dict(backend=backend))
    assert forward.eager
    torch.testing.assert_close(losses, eager_losses)
    assert "torch.compile failed on the backward of DigitsMLP" in "\n".join(libai_log)


class Noisy(DigitsMLP):
    """Nondeterministic beyond torch's RNG: the compiled and the eager call never agree."""

    def forward(self, batch):
        out = super().forward(batch)
        out["loss"] = out["loss"] + int.from_bytes(os.urandom(2), "little") / 1000
        return out


def test_parity_mismatch_stops_naming_the_step_and_both_values():
    with pytest.raises(GraphModeError) as exc:
        train(Noisy, digits_batches(2), graph=True)
    msg = str(exc.value)
    assert msg.startswith("Graph mode parity check, step 1: loss ")
    assert "compiled vs" in msg and "eager, gradient norm" in msg and "differ by more than rtol=0.0001" in msg


def test_parity_mismatch_can_continue_eager(libai_log):
    _, losses, forward, wrapper = train(Noisy, digits_batches(3), graph=True, on_mismatch="eager")
    assert forward.eager and wrapper.eager and len(losses) == 3
    assert "this step uses the eager gradients and training continues in eager mode" in "\n".join(libai_log)


def test_recompile_storm_is_reported_with_the_fix(libai_log):
    """The training forward's recompiles: the model alone (the update, compiled once whatever
    the batch size, is left out)."""
    torch.manual_seed(0)
    forward = GraphModule(DigitsMLP(), compile=dict(dynamic=False, backend="aot_eager"))
    for batch in digits_batches(5, sizes=[8, 9, 10, 11, 12]):
        forward(batch)["loss"].backward()
    assert forward.training_recompiles == 4
    log = "\n".join(libai_log)
    assert "the training graph was recompiled 3 times" in log
    assert "size mismatch" in log and "pad them to a fixed length" in log and "dynamic=True" in log


def test_options_are_checked():
    opt = torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
    with pytest.raises(Exception, match="compile.fulgraph is not a torch.compile argument.*'fullgraph'"):
        GraphOptimWrapper(opt, compile=dict(fulgraph=True))
    with pytest.raises(Exception, match="compile.mode='reduce-overhed'.*'reduce-overhead'"):
        GraphOptimWrapper(opt, compile=dict(mode="reduce-overhed"))
    with pytest.raises(Exception, match="on_failure='eagr'.*'eager'"):
        GraphOptimWrapper(opt, on_failure="eagr")


def test_checkpoints_hold_float_learning_rates_and_load_into_the_same_tensor():
    model = nn.Linear(4, 2)
    wrapper = GraphOptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-3))
    lr = wrapper.optimizer.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor)
    assert isinstance(wrapper.state_dict()["optimizer"]["param_groups"][0]["lr"], float)
    eager = OptimWrapper(torch.optim.AdamW(nn.Linear(4, 2).parameters(), lr=5e-3))
    wrapper.load_state_dict(eager.state_dict())
    assert wrapper.optimizer.param_groups[0]["lr"] is lr and float(lr) == 5e-3


def tiny_gpt():
    from libai.model import GPTForCausalLM

    return GPTForCausalLM(vocab_size=99, hidden_size=32, num_layers=1, num_heads=4,
                          max_position_embeddings=64)


def tiny_bert():
    from libai.model import BertForPreTraining

    return BertForPreTraining(vocab_size=99, hidden_size=32, num_layers=1, num_heads=4,
                              ffn_hidden_size=37, max_position_embeddings=64)


def text_batches(kind, n, B=4, S=16):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(1, 99, (B, S + 1), generator=g)
        if kind == "gpt":
            out.append(dict(input_ids=ids[:, :-1], labels=ids[:, 1:]))
            continue
        mask = torch.ones(B, S, dtype=torch.long)
        mask[1, 10:] = 0  # a padded row: BERT batches keep one length, padding is data
        out.append(dict(input_ids=ids[:, :-1] * mask, attention_mask=mask,
                        token_type_ids=(torch.arange(S) >= S // 2).long().expand(B, S),
                        mlm_positions=torch.randint(0, 10, (B, 3), generator=g),
                        mlm_labels=torch.randint(1, 99, (B, 3), generator=g),
                        next_sentence_label=torch.randint(0, 2, (B,), generator=g)))
    return out


@pytest.mark.parametrize("kind", ["bert"])  # GPT-2 compiles the same layers
def test_graph_equals_eager_tiny_transformers(kind):
    """Dropout on, accumulation 2 with clipping: what the shipped text configs do; BERT's
    batches have a padded row."""
    make = tiny_gpt if kind == "gpt" else tiny_bert
    batches = text_batches(kind, 4)
    common = dict(accumulative_counts=2, clip_grad=dict(type="norm", max_norm=1.0))
    eager, eager_losses, _, _ = train(make, batches, graph=False, common=common)
    graph, graph_losses, forward, _ = train(make, batches, graph=True, common=common)
    torch.testing.assert_close(graph_losses, eager_losses, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(eager.named_parameters(), graph.parameters()):
        # AdamW divides by sqrt(v): where a gradient is ~0, float noise moves the weight by ~1e-5
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-4, msg=name)
    assert not forward.eager and forward.training_recompiles == 0


class Block(nn.Module):
    def __init__(self, chatty=False):
        super().__init__()
        self.lin, self.chatty = nn.Linear(64, 64), chatty

    def forward(self, x):
        if self.chatty:
            print("a side effect dynamo cannot put in a graph")
        return torch.relu(self.lin(x))


class Stack(nn.Module):
    parallel_blocks = ("Block",)

    def __init__(self, chatty=False):
        super().__init__()
        self.embed, self.head = nn.Linear(64, 64), nn.Linear(64, 10)
        self.blocks = nn.Sequential(Block(chatty), Block(chatty))

    def forward(self, batch):
        logits = self.head(self.blocks(self.embed(batch["inputs"])))
        return dict(loss=nn.functional.cross_entropy(logits, batch["labels"]))


def test_blocks_compile_one_by_one_with_the_same_keys_and_numbers():
    """What the runner does for a sharded model (tests/parallel runs it under FSDP2 and TP)."""
    torch.manual_seed(0)
    model, reference = Stack(), Stack()
    reference.load_state_dict(model.state_dict())
    keys = list(model.state_dict())
    graph = GraphModule(model, compile=dict(backend="aot_eager"), on_failure="raise",
                        blocks=list(model.blocks))
    for batch in digits_batches(2):
        graph(batch)["loss"].backward()
        reference(batch)["loss"].backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-6)
    assert list(model.state_dict()) == keys
    assert graph.report().startswith("Graph mode, 2 blocks compiled one by one")
    assert not graph.eager and graph.recompiles() == []  # the two blocks share one graph


def test_blocks_that_fail_to_compile_go_back_to_their_own_forwards(libai_log):
    from libai.parallel import apply_activation_checkpointing

    torch.manual_seed(0)
    model = Stack(chatty=True)
    apply_activation_checkpointing(model, "blocks")
    checkpointed = [b.forward for b in model.blocks]
    graph = GraphModule(model, compile=dict(fullgraph=True, backend="aot_eager"),
                        blocks=list(model.blocks))
    graph(digits_batches(1)[0])["loss"].backward()
    assert graph.eager and "torch.compile failed on the forward of Stack" in "\n".join(libai_log)
    assert [b.forward for b in model.blocks] == checkpointed  # activation checkpointing stays
