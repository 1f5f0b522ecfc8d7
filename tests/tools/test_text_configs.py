"""The text configs through tools/train.py and tools/test.py, as a user runs them, in this
process (run_tool: the same main(argv); the scripts' own processes are tests/tools/test_tools.py's).
"""

import os
import re

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BERT_TINY = os.path.join(ROOT, "configs", "bert_tiny.py")
ROBERTA_TINY = os.path.join(ROOT, "configs", "roberta_tiny.py")
# two validation and test batches (of 64), no plots, no FLOP count: none of it is asserted here
QUICK = ["val_cfg.limit_batches=2", "test_cfg.limit_batches=2", "+default_hooks.logger.plot=False",
         "default_hooks.throughput.count_flops=False"]


@pytest.fixture
def train(run_tool, shipped_config):
    """``train(config, *args)``: tools/train.py in this process. It trains a shipped config
    (shipped_config: the test is slow)."""
    return lambda config, *args: run_tool("tools/train.py", config, *args)


def metrics(log, prefix):
    return {k: float(v) for k, v in re.findall(rf"({prefix}/[\w/]+): ([\d.]+)", log)}


def test_bert_tiny_learns_and_test_tool_reproduces_its_metrics(train, run_tool, tmp_path):
    # 20 steps of the shipped batch (32) and learning rate. Untrained, the model is at chance:
    # masked-token accuracy ~0.004 and perplexity ~7,600 (ln 8192 = 9.0 nats); 20 steps bring it
    # to 0.07 and ~2,500 (2026-11-28): a model that does not learn cannot pass either bound
    out = train(BERT_TINY, "--work-dir", tmp_path, "--cfg-options", "train_cfg.max_iters=20",
                "train_cfg.val_interval=20", "default_hooks.checkpoint.interval=20",
                "default_hooks.logger.interval=10", *QUICK).check()
    log = out.output
    assert "mlm_loss" in log and "nsp_loss" in log  # logged separately
    val = metrics(log, "val")
    assert val["val/mlm/accuracy"] > 0.05 and val["val/mlm/perplexity"] < 4000, val
    test = run_tool("tools/test.py", BERT_TINY, tmp_path / "iter_20.pth", "--work-dir",
                    tmp_path / "test", "--cfg-options", "test_cfg.limit_batches=2").check()
    assert metrics(test.output, "test") == metrics(log, "test") != {}


def test_roberta_tiny_mlm_loss_falls(train, tmp_path):
    # 20 steps of 16 sequences, logged every 5. Untrained, the loss is ln(8192) = 9.0, the
    # masked-token accuracy ~0.004 and the perplexity ~7,600; 20 steps bring them to 8.0 (from
    # 8.9 at step 5), 0.08 and ~3,100 (2026-11-28)
    out = train(ROBERTA_TINY, "--work-dir", tmp_path, "--cfg-options", "train_cfg.max_iters=20",
                "train_cfg.val_interval=20", "train_dataloader.batch_size=16",
                "default_hooks.logger.interval=5", "default_hooks.checkpoint=None", *QUICK).check()
    log = out.output
    assert "Model summary: RobertaForMaskedLM" in log and "Iter [20/20]" in log
    assert "mlm_loss" in log and "nsp_loss" not in log  # masked LM only
    losses = [float(v) for v in re.findall(r"Iter \[\d+/20\].*?mlm_loss: ([\d.]+)", log)]
    assert len(losses) == 4 and losses[-1] < losses[0] - 0.5, losses
    val = metrics(log, "val")
    assert val["val/mlm/accuracy"] > 0.05 and val["val/mlm/perplexity"] < 4000, val


@pytest.mark.parametrize("options, message", [
    (["model.vocab_size=1000"], "corpus.tokenizer.json) has 8192 tokens: set "
                                "model.vocab_size=8192"),
    (["train_dataloader.dataset.max_seq_length=256"],
     "train_dataloader.dataset makes sequences of 256 tokens but the model has only "
     "max_position_embeddings=128"),
    (["train_dataloader.dataset.corpus.source=shakespear"], "Did you mean 'shakespeare'"),
])
def test_text_mistakes_are_one_line(train, tmp_path, options, message):
    # found when the runner is built from the shipped config: before any step
    out = train(BERT_TINY, "--work-dir", tmp_path, "--cfg-options", *options)
    assert out.returncode == 2, out.stderr[-3000:]
    error = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and message in error[0], out.stderr[-3000:]
    assert "Traceback" not in out.stderr


def test_bert_large_fast_dev_run_on_cpu(train, tmp_path):
    # the real BERT-large (24 layers, 336 M parameters, sequences of 512), one step of one
    # sequence (the shipped 2 per step double the time): ~20 s, ~4 GB here. Its validation
    # (a third of a step more) runs on the 2-layer cut below: the same data and evaluators.
    out = train(os.path.join(ROOT, "configs", "bert_large.py"), "--work-dir", tmp_path,
                "--fast-dev-run", "1", "--cfg-options", "train_dataloader.batch_size=1",
                "val_dataloader=None", "val_cfg=None", "val_evaluator=None").check()
    log = out.output
    assert "Iter [1/" in log
    assert "FLOPs per training step: 1.02 TFLOP" in log  # 336 M parameters x 512 tokens x 6
    assert not any(name.endswith(".pth") for name in os.listdir(tmp_path))  # nothing saved


def test_bert_large_shrunk_to_two_layers_trains_and_validates(shipped_config, libai_log,
                                                              tmp_path):
    from libai.runner import Runner

    # the config's short run (its header), for 2 iterations: a warm-up step, then a full one
    cfg = shipped_config("bert_large", "model.num_layers=2", "train_dataloader.batch_size=2",
                         "optim_wrapper.accumulative_counts=1", "train_cfg.max_iters=2",
                         "train_cfg.val_interval=2", "val_dataloader.batch_size=1",
                         "val_cfg.limit_batches=1", "param_scheduler.0.end=1",
                         "param_scheduler.1.begin=1")
    cfg.work_dir = str(tmp_path)
    cfg.default_hooks = dict(logger=dict(interval=1, progress_bar=False, plot=False),
                             checkpoint=None)
    runner = Runner.from_cfg(cfg)
    before = runner.unwrapped_model.bert.blocks[0].mlp.fc1.weight.detach().clone()
    runner.train()
    assert runner.iter == 2 and len(runner.unwrapped_model.bert.blocks) == 2
    assert not torch.equal(before, runner.unwrapped_model.bert.blocks[0].mlp.fc1.weight)
    # one sequence of 512 through bert_large's validation set and evaluators
    assert any("val/mlm/accuracy" in m and "samples: 1 " in m for m in libai_log), libai_log
