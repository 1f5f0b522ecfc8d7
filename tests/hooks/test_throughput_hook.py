"""ThroughputHook: the FLOPs of the real first step, throughput in the log lines, math unchanged."""

import dataclasses
import json
import os
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from libai.hooks import IterTimerHook, LoggerHook
from libai.hooks.throughput_hook import (
    ThroughputHook,
    batch_reader,
    device_peak_tflops,
    peak_tflops_by_name,
)
from libai.model.execution import COMPILED_FLOPS
from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.errors import ConfigError

M, K, N = 6, 5, 3  # batch, in features, out features


class LinearNet(nn.Module):
    """The whole model is one nn.Linear (K -> N)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(K, N)

    def forward(self, batch):
        logits = self.fc(batch["inputs"])
        if not self.training:
            return {"logits": logits}
        return {"loss": F.cross_entropy(logits, batch["labels"])}


class Tokens(Dataset):
    """Sequences of T token ids with a label each: batches are dicts with input_ids."""

    T = 7

    def __len__(self):
        return 24

    def __getitem__(self, i):
        return {"input_ids": torch.arange(self.T) % 11, "labels": torch.tensor(i % 2)}


class TokenNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, batch):
        logits = self.head(self.embed(batch["input_ids"]).mean(1))
        return {"loss": F.cross_entropy(logits, batch["labels"])}


def _runner(tmp_path, model, dataset, max_iters, interval=2, throughput=None, batch_size=M,
            train_cfg=None, device="auto"):
    hooks = dict(logger=dict(interval=interval, progress_bar=False, plot=False,
                             backends=[dict(type="JsonlBackend", flush_secs=0)]),
                 checkpoint=None)
    if throughput is not None:
        hooks["throughput"] = throughput
    return Runner.from_cfg(dict(
        model=model, work_dir=str(tmp_path),
        train_dataloader=dict(dataset=dataset, batch_size=batch_size,
                              sampler=dict(type="DefaultSampler", shuffle=False)),
        train_cfg=train_cfg or dict(type="IterBasedTrainLoop", max_iters=max_iters),
        optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.1)),
        default_hooks=hooks, randomness=dict(seed=0), device=device))


def _hook(runner):
    return next(h for h in runner.hooks if isinstance(h, ThroughputHook))


def _log(runner):
    with open(os.path.join(runner.log_dir, f"{runner.timestamp}.log")) as f:
        return f.read()


def _toy_data():
    from libai.testing import ToyDataset

    return ToyDataset(num_samples=4 * M, in_features=K, num_classes=N)


def test_linear_flops_are_the_analytic_count_and_lines_show_throughput(tmp_path):
    runner = _runner(tmp_path, LinearNet(), _toy_data(), max_iters=5,
                     throughput=dict(peak_tflops=1e-3))
    runner.train()
    hook = _hook(runner)
    # forward: addmm, 2*M*N*K; backward: the weight gradient, 2*M*N*K (the input needs none;
    # the bias gradient is a sum, which FlopCounterMode does not count)
    assert hook.flops_per_step == 2 * M * N * K + 2 * M * N * K == 360
    assert runner.message_hub.get_info("flops_per_step") == 360
    log = _log(runner)
    assert "FLOPs per training step: 360 FLOP (forward + backward" in log
    assert "60 FLOP per sample" in log and "Model summary: LinearNet" in log
    lines = [line for line in log.splitlines() if " - Iter [" in line]
    assert len(lines) == 3  # iterations 2, 4, 5
    for line in lines:
        # as a person reads them (issue 27); scalars.jsonl keeps the full values (below)
        assert re.search(r"  [\d,.]+ samples/s  [\d.]+ [kMGT]?FLOP/s  MFU [\d.e+-]+%", line)
        assert "samples_per_s" not in line and "tflops" not in line and "tokens/s" not in line
    # the value is the batch over the interval's mean iteration time, as in the line's `time`
    hub = runner.message_hub
    last = list(hub.history("train/time").values)[-1]  # iteration 5 alone
    assert hub.latest("train/samples_per_s") == pytest.approx(M / last, rel=1e-6)
    assert hub.latest("train/tflops") == pytest.approx(360 / last / 1e12, rel=1e-6)
    assert hub.latest("train/mfu") == pytest.approx(hub.latest("train/tflops") / 1e-3)
    with open(os.path.join(runner.series_dir, "scalars.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert [r["step"] for r in rows if "train/samples_per_s" in r] == [2, 4, 5]
    full = [r for r in rows if "train/mfu" in r][-1]  # the full values, not the line's text
    assert full["train/samples_per_s"] == pytest.approx(hub.latest("train/samples_per_s"), rel=1e-12)
    assert full["train/mfu"] == pytest.approx(hub.latest("train/mfu"), rel=1e-12)
    # counted once: after the first step the hook left the per-iteration stage it counted in
    assert not any(isinstance(m.__self__, ThroughputHook)
                   for m in runner.stage_methods.get("before_train_iter", ()))


def test_tokens_per_second_for_batches_with_input_ids(tmp_path):
    # on the CPU: the lines' last claim is that a CPU has no known peak (a GPU's shows MFU)
    runner = _runner(tmp_path, TokenNet(), Tokens(), max_iters=4, batch_size=3, device="cpu")
    runner.train()
    hook, hub = _hook(runner), runner.message_hub
    assert (hook.first_samples, hook.first_tokens) == (3, 3 * Tokens.T)
    assert hub.latest("train/tokens_per_s") == pytest.approx(
        hub.latest("train/samples_per_s") * Tokens.T)
    lines = [line for line in _log(runner).splitlines() if " - Iter [" in line]
    assert lines and all(" samples/s  " in x and " tokens/s  " in x for x in lines)
    assert all("MFU" not in x for x in lines)  # a CPU has no known peak


def test_epoch_loop_lines_carry_throughput(tmp_path):
    runner = _runner(tmp_path, LinearNet(), _toy_data(), max_iters=None, interval=3,
                     train_cfg=dict(type="EpochBasedTrainLoop", max_epochs=2))  # 4 iters each
    runner.train()
    lines = [x for x in _log(runner).splitlines() if " - Epoch [" in x]
    assert [x.split(" - ")[-1].split("  ")[0] for x in lines] == [
        "Epoch [1/2][3/4]", "Epoch [1/2][4/4]", "Epoch [2/2][3/4]", "Epoch [2/2][4/4]"]
    # on the runner's device: MFU ends the line where its float32 peak is known (a listed GPU),
    # FLOP/s where it is not (a CPU)
    end = r"  MFU [\d.e+-]+%$" if device_peak_tflops(runner.device, half=False) else "$"
    assert all(re.search(r" samples/s  .*FLOP/s" + end, x) for x in lines), lines


def _train(tmp_path, throughput):
    cfg = toy_config(
        work_dir=str(tmp_path),
        # dropout draws random numbers: counting must not shift them
        model=dict(type="DigitsMLP", in_features=8, hidden=16, num_classes=2, dropout=0.5),
        train_cfg=dict(max_iters=6), val_dataloader=None, val_cfg=None, val_evaluator=None,
        optim_wrapper=dict(optimizer=dict(type="AdamW", lr=0.01)),
        default_hooks=dict(checkpoint=None, throughput=throughput,
                           logger=dict(interval=3, backends=[], plot=False,
                                       progress_bar=False)))
    runner = Runner.from_cfg(cfg)
    return runner, runner.train().state_dict()


def test_parameters_after_training_equal_those_without_the_hook(tmp_path):
    with_hook, state = _train(tmp_path / "a", dict(type="ThroughputHook"))
    without, plain = _train(tmp_path / "b", None)
    assert _hook(with_hook).flops_per_step > 0  # the first step did run under the counter
    assert not any(isinstance(h, ThroughputHook) for h in without.hooks)  # turned off
    assert state.keys() == plain.keys()
    assert all(torch.equal(state[k], plain[k]) for k in state)


def test_graph_mode_says_flops_unknown(make_runner, run_iters):
    hook = ThroughputHook()
    runner = make_runner(IterTimerHook(), hook,
                         LoggerHook(interval=2, backends=[], progress_bar=False, plot=False),
                         max_iters=3)
    # the record of a compiled run (libai.runner.distribute.prepare_model builds it)
    runner.execution = dataclasses.replace(runner.execution, compiled=True,
                                           flops_uncountable=COMPILED_FLOPS)
    run_iters(runner)
    assert hook.flops_per_step is None and hook._counter is None
    run_iters(runner)  # training starts again (a stop and a second train())
    said = [m for m in runner.messages if "FLOPs per training step: unknown (graph mode" in m]
    assert len(said) == 1  # once (issue 27)


def test_first_step_that_raises_leaves_no_counter_on(make_runner):
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    hook = ThroughputHook(summary=False)
    runner = make_runner(hook, max_iters=3)
    runner.call_hook("before_train")
    runner.call_hook("before_train_iter", batch_idx=0, data_batch=None)
    assert hook._counter is not None
    runner.call_hook("after_run")  # the step raised: train()'s finally calls after_run
    assert hook._counter is None and not _get_current_dispatch_mode_stack()


def test_batch_reader_shapes():
    assert batch_reader({"input_ids": torch.zeros(4, 9)})({"input_ids": torch.zeros(2, 9)}) == (2, 18)
    assert batch_reader({"meta": "x", "inputs": torch.zeros(4, 3)})(
        {"meta": "y", "inputs": torch.zeros(5, 3)}) == (5, 0)
    assert batch_reader((torch.zeros(3, 2), torch.zeros(3)))((torch.zeros(3, 2),)) == (3, 0)
    assert batch_reader(torch.zeros(8, 2))(torch.zeros(7, 2)) == (7, 0)
    assert batch_reader({"x": 1}) is None and batch_reader(None) is None


def test_peak_table():
    assert peak_tflops_by_name("NVIDIA H100 80GB HBM3", half=True) == 989.0
    assert peak_tflops_by_name("NVIDIA H100 PCIe", half=True) == 756.0
    assert peak_tflops_by_name("NVIDIA A100-SXM4-80GB", half=False) == 19.5
    assert peak_tflops_by_name("NVIDIA A100-SXM4-80GB", half=False, tf32=True) == 156.0
    assert peak_tflops_by_name("NVIDIA L40S", half=True) == 362.0
    assert peak_tflops_by_name("NVIDIA L4", half=True) == 121.0
    assert peak_tflops_by_name("NVIDIA A10G", half=True) is None  # not the A10's figure
    assert device_peak_tflops("cpu", half=True) is None
    with pytest.raises(ConfigError, match="peak_tflops"):
        ThroughputHook(peak_tflops=0)


def test_a_resumed_run_takes_the_count_of_the_run_it_continues(make_runner):
    # FlopCounterMode decomposes ops it has no formula for (silu_backward...): a counted step
    # can differ from a plain one by ~1e-9, so a resumed run must not count its first step
    hook = ThroughputHook(summary=False)
    runner = make_runner(hook, max_iters=3)
    runner.message_hub.update_info("flops_per_step", 1200)
    runner.message_hub.update_info("flops_counted_batch", "6,0")  # what a checkpoint restores
    runner.call_hook("before_train")
    runner.call_hook("before_train_iter", batch_idx=0, data_batch=None)
    assert hook._counter is None  # the step runs plain
    assert (hook.flops_per_step, hook.first_samples, hook.first_tokens) == (1200, 6, 0)
    assert any("FLOPs per training step: 1.2 kFLOP (counted by the run this one resumes)" in m
               for m in runner.messages), runner.messages


def test_a_llama_run_resumed_through_train_py_continues_bit_for_bit(tmp_path, run_tool,
                                                                    shipped_config):
    # Llama's SwiGLU (silu) made the counted first step of a resumed run differ (1.5e-8);
    # tools/train.py in this process (shipped_config: it trains configs/llama_tiny.py), training
    # only: an evaluation would not touch the weights compared
    opts = ["--cfg-options", "train_cfg.max_iters=6", "default_hooks.checkpoint.interval=3",
            "model.num_layers=2", "model.hidden_size=64", "model.ffn_hidden_size=96",
            "train_dataloader.batch_size=4", "val_dataloader=None", "val_evaluator=None",
            "val_cfg=None", "test_dataloader=None", "test_evaluator=None", "test_cfg=None",
            "+default_hooks.logger.plot=False"]

    def train(work, *extra):
        run_tool("tools/train.py", "configs/llama_tiny.py", "--work-dir", work, *extra,
                 *opts).check()

    train(tmp_path / "a")
    (tmp_path / "b").mkdir()
    for name in ("iter_3.pth", "iter_3.pth.manifest.json"):
        (tmp_path / "b" / name).write_bytes((tmp_path / "a" / name).read_bytes())
    (tmp_path / "b" / "latest_checkpoint").write_text("iter_3.pth")
    train(tmp_path / "b", "--resume")
    a, b = (torch.load(tmp_path / d / "iter_6.pth", weights_only=True)["state_dict"] for d in "ab")
    assert all(torch.equal(a[k], b[k]) for k in a)
