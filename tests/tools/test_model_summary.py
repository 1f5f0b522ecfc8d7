"""libai/model/summary.py and tools/model_summary.py: the table, its totals, one step's FLOPs.

The tool runs once as a process of its own (digits_mlp), else in this process (run_tool)."""

import importlib.util
import os

import pytest
import torch
from torch import nn

from libai.model.summary import format_summary, summarize_model
from libai.utils.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "model_summary.py")


def _tool():
    spec = importlib.util.spec_from_file_location("model_summary_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Tied(nn.Module):
    """Own parameter, a frozen module, a weight shared by two children, a bfloat16 buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))
        self.embed = nn.Embedding(10, 4)
        self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.frozen = nn.Linear(4, 2)
        self.frozen.requires_grad_(False)
        self.register_buffer("mask", torch.ones(8, dtype=torch.bfloat16))


def test_rows_and_total_match_the_parameters():
    model = Tied()
    summary = summarize_model(model)
    params = list(model.parameters())  # distinct tensors: the tied weight once
    assert summary.total_params == sum(p.numel() for p in params) == 3 + 40 + 20 + 4 * 2 + 2
    assert sum(r.params for r in summary.rows) == summary.total_params
    assert summary.trainable_params == sum(p.numel() for p in params if p.requires_grad)
    rows = {r.name: r for r in summary.rows}
    assert list(rows) == ["(own)", "embed", "body", "head", "frozen"]
    assert (rows["embed"].params, rows["head"].params, rows["head"].shared) == (40, 0, 40)
    assert (rows["frozen"].params, rows["frozen"].trainable) == (10, 0)
    assert rows["body"].type == "Sequential" and rows["(own)"].params == 3
    assert summary.param_mib_by_dtype == {"float32": summary.total_params * 4 / 2**20}
    assert summary.buffer_mib == 16 / 2**20
    assert summary.size_mib == pytest.approx((summary.total_params * 4 + 16) / 2**20)
    for use_rich in (False, True):
        text = format_summary(summary, use_rich=use_rich)
        assert "Model summary: Tied" in text and "(+40 shared)" in text
        assert f"{summary.total_params:,}" in text and "MiB" in text


def test_single_child_chains_are_unfolded_and_wrappers_looked_through():
    model = nn.Sequential(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))
    compiled_like = nn.Module()
    compiled_like._orig_mod = model
    summary = summarize_model(compiled_like)
    assert [r.name for r in summary.rows] == ["0.0", "0.1", "0.2"]
    assert summary.total_params == 13


def test_one_step_flops_of_linear_layers():
    tool = _tool()
    m, k, n1, n2 = 6, 5, 3, 2

    class Net(nn.Module):
        def __init__(self, layers):
            super().__init__()
            self.layers = nn.Sequential(*layers)

        def forward(self, batch):
            return {"loss": self.layers(batch["inputs"]).square().mean()}

    batch = {"inputs": torch.randn(m, k)}
    one = tool.count_step_flops(Net([nn.Linear(k, n1)]), batch, torch.device("cpu"))
    # forward 2MNK; backward the weight gradient only (the input needs no gradient)
    assert (one["forward"], one["backward"]) == (2 * m * n1 * k, 2 * m * n1 * k)
    two = tool.count_step_flops(Net([nn.Linear(k, n1), nn.Linear(n1, n2)]), batch, "cpu")
    # the second layer's input needs a gradient: its backward is twice its forward
    assert two["forward"] == 2 * m * n1 * k + 2 * m * n2 * n1
    assert two["backward"] == 2 * m * n1 * k + 2 * (2 * m * n2 * n1)
    assert two["samples"] == m and two["tokens"] == 0
    assert two["shapes"] == {"layers.0": f"{m}x{n1}", "layers.1": f"{m}x{n2}"}
    assert two["rows"] == {"layers.0": 2 * m * n1 * k, "layers.1": 2 * m * n2 * n1}


def test_tool_prints_table_and_flops_for_digits_mlp(run_process):
    out = run_process(TOOL, "configs/digits_mlp.py")
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "Model summary: DigitsMLP" in text
    assert "net.0" in text and "32x256" in text and "85,002" in text
    batch, sizes = 32, [(64, 256), (256, 256), (256, 10)]  # configs: batch 32, 64-256-256-10
    forward = sum(2 * batch * i * o for i, o in sizes)
    backward = forward + sum(2 * batch * i * o for i, o in sizes[1:])  # no input gradient
    assert f"({batch} samples from train_dataloader; {forward + backward:,} FLOPs)" in text
    assert "FLOPs per training step: 15.2 MFLOP = forward 5.41 MFLOP + backward 9.76 MFLOP" in text


def test_tool_on_a_tiny_bert_counts_tokens(run_tool):
    # BERT-tiny cut to one layer and a batch of 2 (the corpus cache is built on first use)
    out = run_tool(TOOL, "configs/bert_tiny.py", "--cfg-options", "model.num_layers=1",
                   "train_dataloader.batch_size=2")
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "Model summary: BertForPreTraining" in text
    for row in ("bert ", "mlm_head ", "sentence_head "):
        assert row in text
    seq = 128  # configs/bert_tiny.py: max_seq_length
    assert f"(2 samples, {2 * seq} tokens from train_dataloader;" in text and "per token" in text


def test_tool_table_only_and_errors(capsys):
    tool = _tool()  # in this process: no second interpreter to start
    config = os.path.join(ROOT, "configs", "digits_mlp.py")
    assert tool.main([config, "--no-flops", "--cfg-options", "model.hidden=32"]) == 0
    out = capsys.readouterr().out
    assert "Model summary: DigitsMLP" in out and "FLOPs" not in out
    assert f"{64 * 32 + 32 + 32 * 32 + 32 + 32 * 10 + 10:,}" in out
    with pytest.raises(ConfigError, match="hidden"):
        tool.main([config, "--no-flops", "--cfg-options", "model.hiden=32"])
    with pytest.raises(ConfigError, match="depth"):
        tool.main([config, "--depth", "0"])
