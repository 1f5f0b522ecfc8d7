"""The text configs through tools/train.py and tools/test.py, as a user runs them."""

import os
import re
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BERT_TINY = os.path.join(ROOT, "configs", "bert_tiny.py")
ROBERTA_TINY = os.path.join(ROOT, "configs", "roberta_tiny.py")


def run(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def metrics(log, prefix):
    return {k: float(v) for k, v in re.findall(rf"({prefix}/[\w/]+): ([\d.]+)", log)}


def test_bert_tiny_learns_and_test_tool_reproduces_its_metrics(tmp_path):
    out = run("tools/train.py", BERT_TINY, "--work-dir", str(tmp_path), "--cfg-options",
              "train_cfg.max_iters=120", "train_cfg.val_interval=120",
              "default_hooks.checkpoint.interval=120")
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert "mlm_loss" in log and "nsp_loss" in log  # logged separately
    val = metrics(log, "val")
    assert val["val/mlm/accuracy"] > 0.05 and val["val/mlm/perplexity"] < 2000, val  # random: 0, ~8000
    test = run("tools/test.py", BERT_TINY, str(tmp_path / "iter_120.pth"), "--work-dir",
               str(tmp_path / "test"))
    assert test.returncode == 0, test.stderr[-3000:]
    assert metrics(test.stdout + test.stderr, "test") == metrics(log, "test")


def test_roberta_tiny_fast_dev_run(tmp_path):
    out = run("tools/train.py", ROBERTA_TINY, "--work-dir", str(tmp_path), "--fast-dev-run")
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert "Model summary: RobertaForMaskedLM" in log and "Iter [2/2]" in log
    assert "mlm_loss" in log and "nsp_loss" not in log  # masked LM only
    assert "val/mlm/accuracy" in log and not os.listdir(tmp_path)  # nothing written


def test_roberta_tiny_mlm_loss_falls(tmp_path):
    # 30 steps of 16 sequences, evaluated on 2 batches: ~1 min on 2 cores
    out = run("tools/train.py", ROBERTA_TINY, "--work-dir", str(tmp_path), "--cfg-options",
              "train_cfg.max_iters=30", "train_cfg.val_interval=30",
              "train_dataloader.batch_size=16", "val_cfg.limit_batches=2",
              "test_cfg.limit_batches=2", "default_hooks.logger.interval=10",
              "default_hooks.checkpoint=None")
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    losses = [float(v) for v in re.findall(r"Iter \[\d+/30\].*?mlm_loss: ([\d.]+)", log)]
    assert len(losses) == 3 and losses[-1] < losses[0] - 0.5, losses  # ln(8192) = 9.0 at start
    val = metrics(log, "val")
    assert val["val/mlm/perplexity"] < 3000, val  # random: ~8000


@pytest.mark.parametrize("options, message", [
    (["model.vocab_size=1000"], "corpus.tokenizer.json) has 8192 tokens: set "
                                "model.vocab_size=8192"),
    (["train_dataloader.dataset.max_seq_length=256"],
     "train_dataloader.dataset makes sequences of 256 tokens but the model has only "
     "max_position_embeddings=128"),
    (["train_dataloader.dataset.corpus.source=shakespear"], "Did you mean 'shakespeare'"),
])
def test_text_mistakes_are_one_line(tmp_path, options, message):
    out = run("tools/train.py", BERT_TINY, "--work-dir", str(tmp_path), "--cfg-options", *options)
    assert out.returncode == 2, out.stderr[-3000:]
    error = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and message in error[0], out.stderr[-3000:]
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_bert_large_fast_dev_run_on_cpu(tmp_path):
    # the real BERT-large (24 layers, 336 M parameters, sequences of 512), one step of one
    # sequence (the shipped 2 per step double the time): ~20 s, ~4 GB here
    out = run("tools/train.py", os.path.join(ROOT, "configs", "bert_large.py"), "--work-dir",
              str(tmp_path), "--fast-dev-run", "1", "--cfg-options", "train_dataloader.batch_size=1",
              "val_dataloader.batch_size=1")
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert "Iter [1/" in log and "val/mlm/accuracy" in log
    assert "FLOPs per training step: 1.02 TFLOP" in log  # 336 M parameters x 512 tokens x 6
    assert not any(name.endswith(".pth") for name in os.listdir(tmp_path))  # nothing saved


@pytest.mark.slow
def test_bert_large_shrunk_to_two_layers_trains(tmp_path):
    from libai.config import Config
    from libai.runner import Runner

    cfg = Config.fromfile(os.path.join(ROOT, "configs", "bert_large.py"))
    cfg.merge_from_options(["model.num_layers=2", "train_dataloader.batch_size=2",
                            "optim_wrapper.accumulative_counts=1", "train_cfg.max_iters=3",
                            "param_scheduler.0.end=2", "param_scheduler.1.begin=2"])
    cfg.work_dir = str(tmp_path)
    cfg.val_dataloader = None  # training only
    cfg.default_hooks = dict(logger=dict(interval=1, progress_bar=False, plot=False),
                             checkpoint=None)
    runner = Runner.from_cfg(cfg)
    before = runner.unwrapped_model.bert.blocks[0].mlp.fc1.weight.detach().clone()
    runner.train()
    assert runner.iter == 3 and len(runner.unwrapped_model.bert.blocks) == 2
    assert not torch.equal(before, runner.unwrapped_model.bert.blocks[0].mlp.fc1.weight)
