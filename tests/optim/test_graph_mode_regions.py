"""Graph mode compiles a transformer's repeated blocks once per class (regional compilation) and
reuses the code for every block; ``compile=dict(regions=False)`` compiles the whole model, as
graph mode did before; both train to the same losses. On the CPU.

The graphs are counted with a backend that records what dynamo hands it (and runs it eagerly):
one graph of one block's work for N blocks, instead of one graph holding all of them."""

import logging

import pytest
import torch
from torch import nn

from libai.config import Config
from libai.model import BertForPreTraining, DigitsMLP, GPTForCausalLM, make_train_step
from libai.model.blocks import find_blocks
from libai.model.graph import GraphModule
from libai.optim import GraphOptimWrapper
from libai.parallel import parse_parallel
from libai.runner.distribute import prepare_model
from libai.utils.errors import ConfigError


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()  # every test compiles from its own cache entries
    yield
    torch._dynamo.reset()


class Recorder:
    """A torch.compile backend that keeps the graphs dynamo captures and runs them eagerly."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def linears(self):
        """How many linear layers each captured graph calls."""
        linear = (torch._C._nn.linear, nn.functional.linear)
        return [sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target in linear)
                + sum(1 for n in gm.graph.nodes if n.op == "call_module"
                      and isinstance(gm.get_submodule(n.target), nn.Linear))
                for gm in self.graphs]


def gpt(num_layers=4):
    torch.manual_seed(0)
    return GPTForCausalLM(vocab_size=99, hidden_size=32, num_layers=num_layers, num_heads=4,
                          max_position_embeddings=64)


def bert():
    torch.manual_seed(0)
    return BertForPreTraining(vocab_size=99, hidden_size=32, num_layers=3, num_heads=4,
                              ffn_hidden_size=37, max_position_embeddings=64)


def gpt_batch(seed=0):
    ids = torch.randint(1, 99, (4, 17), generator=torch.Generator().manual_seed(seed))
    return dict(input_ids=ids[:, :-1], labels=ids[:, 1:])


def prepare(model, compile):
    """The model as the runner prepares it in one process with ``compile=...``."""
    cfg = Config(dict(compile=compile))
    pc = parse_parallel(None, 1)
    return prepare_model(cfg, model, pc, torch.device("cpu"), logging.getLogger("libai"))


def test_blocks_of_one_class_compile_once_by_default():
    """GPT-2 with 4 blocks: one graph, holding one block's linear layers, serves all four, and
    the log says how the model was compiled."""
    model, recorder = gpt(), Recorder()
    per_block = sum(isinstance(m, nn.Linear) for m in find_blocks(model, None)[0].modules())
    execution = prepare(model, dict(backend=recorder))
    for seed in range(2):
        execution.model(gpt_batch(seed))["loss"].backward()
    assert recorder.linears() == [per_block]  # one graph, one block: compiled once for four
    assert execution.graph.recompiles() == []
    assert execution.graph.report().startswith("Graph mode, 4 blocks compiled one by one")


def test_regions_false_compiles_the_whole_model_and_a_model_without_blocks_compiles_whole():
    model, recorder = gpt(), Recorder()
    per_block = sum(isinstance(m, nn.Linear) for m in find_blocks(model, None)[0].modules())
    prepare(model, dict(backend=recorder, regions=False)).model(gpt_batch())["loss"].backward()
    assert len(recorder.graphs) == 1 and recorder.linears()[0] >= 4 * per_block
    digits, recorder = DigitsMLP(), Recorder()
    batch = dict(inputs=torch.randn(8, 64), labels=torch.randint(0, 10, (8,)))
    execution = prepare(digits, dict(backend=recorder))
    execution.model(batch)["loss"].backward()
    assert recorder.linears() == [sum(isinstance(m, nn.Linear) for m in digits.modules())]
    with pytest.raises(ConfigError, match=r"compile.regions='no': expected True .* or False"):
        prepare(gpt(), dict(regions="no"))


def test_parity_check_runs_an_eager_copy_of_compiled_blocks():
    """The parity check's reference is a copy of the model: its blocks must run eager and on
    their own parameters, not call the compiled forwards of the original blocks."""
    model, recorder = gpt(2), Recorder()
    execution = prepare(model, dict(backend=recorder))
    graph = execution.graph
    reference, _ = graph._run_reference((gpt_batch(),), {})
    blocks = find_blocks(reference, None)
    assert all("forward" not in block.__dict__ for block in blocks)  # the class's forward
    assert all("forward" in block.__dict__ for block in find_blocks(model, None))  # compiled


def train(make_model, batches, regions, backend="inductor"):
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    wrapper = GraphOptimWrapper(opt, compile=dict(backend=backend), verify_steps=1,
                                accumulative_counts=2, clip_grad=dict(type="norm", max_norm=1.0))
    forward = GraphModule(model, compile=wrapper.compile_options, on_failure="raise",
                          blocks=find_blocks(model, None) if regions else None)
    wrapper.bind_model(forward)
    wrapper.initialize_count_status(model, 0, len(batches))
    step = make_train_step(model, forward)
    losses = [float(step(batch, wrapper)["loss"]) for batch in batches]
    assert not forward.eager
    return model, losses


@pytest.mark.parametrize("kind", ["gpt", "bert"])
def test_regional_compile_trains_to_the_same_losses_as_the_whole_model(kind, inductor):
    """Inductor, dropout on, accumulation 2 with clipping, the parity check on its first step:
    the losses and the weights of the two ways agree to float32 rounding."""
    from test_graph_mode import text_batches

    make = (lambda: gpt(3)) if kind == "gpt" else bert
    batches = [gpt_batch(seed) for seed in range(6)] if kind == "gpt" else text_batches("bert", 6)
    whole, whole_losses = train(make, batches, regions=False)
    torch._dynamo.reset()
    regional, regional_losses = train(make, batches, regions=True)
    torch.testing.assert_close(regional_losses, whole_losses, rtol=1e-5, atol=0)
    for (name, p), q in zip(whole.named_parameters(), regional.parameters()):
        # AdamW divides by sqrt(v): where a gradient is ~0, float noise moves the weight by ~1e-5
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-4, msg=name)
