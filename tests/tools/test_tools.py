"""tools/train.py and tools/test.py end to end, as a user runs them.

One real process of each shim (test_train_and_test_tools_as_processes); every other case runs
the same ``main(argv)`` in this process (run_tool)."""

import json
import os
import re

import pytest
import torch

from libai.utils.run_layout import wait_for_plots

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICK = os.path.join(ROOT, "configs", "digits_mlp.py")


def test_train_and_test_tools_as_processes(run_process, tmp_path):
    """`python tools/train.py`: logs, checkpoints, TensorBoard and the plots, drawn by a process
    that outlives the run; then `python tools/test.py` on its checkpoint evaluates and dumps."""
    work = tmp_path / "digits"
    out = run_process("tools/train.py", QUICK, "--work-dir", work, "--cfg-options",
                      "train_cfg.max_iters=300", "train_cfg.val_interval=150",
                      "default_hooks.checkpoint.interval=150",
                      "default_hooks.logger.interval=50").check()
    log = out.output
    assert "Iter [300/300]" in log and "val/accuracy" in log and "test/accuracy" in log
    files = os.listdir(work)
    assert {"iter_150.pth", "iter_300.pth", "latest_checkpoint"} <= set(files)
    assert any(f.startswith("best_val_accuracy_iter_") for f in files)
    run_dir = work / next(f for f in files if f[:8].isdigit() and os.path.isdir(work / f))
    lines = [json.loads(line) for line in open(run_dir / "scalars.jsonl")]
    assert [r["step"] for r in lines if "train/loss" in r] == [50, 100, 150, 200, 250, 300]
    acc = [r["val/accuracy"] for r in lines if "val/accuracy" in r]
    assert acc[-1] > 0.9, acc
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [50, 100, 150, 200, 250, 300]
    assert "drawing" in log and "in the background" in log

    dump = tmp_path / "test" / "preds.pt"
    out = run_process("tools/test.py", QUICK, work / "iter_300.pth", "--work-dir",
                      tmp_path / "test", "--dump", dump).check()
    acc = float(re.search(r"Test \(iteration 300\)  test/accuracy: ([0-9.]+)", out.output)[1])
    assert acc > 0.85, acc  # 300 iterations, on the held-out test split
    assert "Test (iteration 300)" in out.output  # the checkpoint's iteration
    preds = torch.load(dump)  # the held-out test split: 15% of the 1,797 images
    assert preds["logits"].shape == (270, 10) and preds["labels"].shape == (270,)
    assert (preds["logits"].argmax(1) == preds["labels"]).float().mean() == pytest.approx(acc, abs=1e-4)

    wait_for_plots(str(work))  # the plots come from a background process, a second or so later
    assert os.path.getsize(run_dir / "plots" / "loss.png") > 1000
    assert os.path.getsize(run_dir / "plots" / "overview.png") > 1000


def test_test_tool_logs_beside_the_checkpoint_and_says_the_metrics_once(run_tool, tmp_path):
    """tools/test.py's run folder goes into the work dir holding the checkpoint, not into the
    config's work dir (work_dirs/digits_mlp of the working directory); the metrics are one line."""
    work = tmp_path / "mine"
    run_tool("tools/train.py", QUICK, "--work-dir", work, "--cfg-options", "train_cfg.max_iters=2",
             "default_hooks.checkpoint.save_best=None", "+default_hooks.logger.plot=False",
             cwd=tmp_path).check()
    before = set(os.listdir(work))
    out = run_tool("tools/test.py", QUICK, work / "iter_2.pth", "--cfg-options",
                   "+default_hooks.logger.plot=False", cwd=tmp_path).check()
    assert not (tmp_path / "work_dirs").exists()
    (folder,) = set(os.listdir(work)) - before
    log = (work / folder / f"{folder}.log").read_text()
    assert "Test (iteration 2)  test/accuracy" in log
    assert out.stdout.count("test/accuracy") == 1, out.stdout


def test_typo_in_cfg_options_is_one_line_with_suggestion(run_tool, tmp_path):
    out = run_tool("tools/train.py", QUICK, "--work-dir", tmp_path, "--cfg-options",
                   "train_cfg.max_iter=5")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "max_iter" in out.stderr and "Did you mean 'max_iters'" in out.stderr


def test_unknown_type_in_config_file(run_tool, tmp_path):
    cfg = tmp_path / "typo.py"
    cfg.write_text(f"_base_ = {QUICK!r}\nmodel = dict(type='DigitMLP')\n")
    out = run_tool("tools/train.py", cfg, "--work-dir", tmp_path / "w")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "Did you mean 'DigitsMLP'" in out.stderr


def test_missing_config_file_and_debug_traceback(run_tool):
    out = run_tool("tools/train.py", "configs/no_such.py")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no_such.py" in out.stderr
    out = run_tool("tools/train.py", "configs/no_such.py", "--debug")
    assert "Traceback" in out.stderr


def test_fast_dev_run(run_tool, tmp_path):
    out = run_tool("tools/train.py", QUICK, "--work-dir", tmp_path, "--fast-dev-run").check()
    # the lines count to where the dry run stops, not to the config's 2000 (issue 27)
    assert "Iter [2/2]" in out.output and "/2000]" not in out.output
    assert os.listdir(tmp_path) == []  # no checkpoint, run folder, scalars or plots


def test_print_config_shows_merged_config(run_tool):
    out = run_tool("tools/print_config.py", QUICK, "--cfg-options", "train_cfg.max_iters=7").check()
    assert "max_iters=7" in out.stdout and "DigitsMLP" in out.stdout


DDP_CONFIG = """
model = dict(type="ToyModel", in_features=8, num_classes=2)
train_dataloader = dict(dataset=dict(type="ToyDataset", num_samples=64, seed=0),
                        sampler=dict(type="DefaultSampler", shuffle=True), batch_size={batch})
val_dataloader = dict(dataset=dict(type="ToyDataset", num_samples=31, seed=1),
                      sampler=dict(type="DefaultSampler", shuffle=False), batch_size=4)
val_evaluator = dict(type="Accuracy")
train_cfg = dict(type="IterBasedTrainLoop", max_iters=10, val_interval=5)
val_cfg = dict(type="ValLoop")
optim_wrapper = dict(optimizer=dict(type="SGD", lr=0.1))
default_hooks = dict(logger=dict(interval=5, plot=False), checkpoint=dict(interval=5))
randomness = dict(seed=0)
"""


def test_ddp_two_processes_match_one_process_with_double_batch(spawn_ranks, run_tool, tmp_path):
    """2 ranks x batch 4 see the same 8 samples per step as 1 process x batch 8 (the math: ranks
    forked here; tools/train.py under torchrun itself: tests/tools/test_dist_teardown.py)."""
    for name, batch in (("ddp", 4), ("single", 8)):
        (tmp_path / f"{name}.py").write_text(DDP_CONFIG.format(batch=batch))
    ddp = spawn_ranks(2, "tools/train.py", tmp_path / "ddp.py", "--work-dir", tmp_path / "w_ddp")
    ddp.check()
    run_tool("tools/train.py", tmp_path / "single.py", "--work-dir", tmp_path / "w_single").check()
    assert "world size   2" in ddp.output
    run_dirs = [d for d in os.listdir(tmp_path / "w_ddp") if d[:8].isdigit()]
    assert len(run_dirs) == 1  # rank 0 alone writes logs
    a = torch.load(tmp_path / "w_ddp" / "iter_10.pth")
    b = torch.load(tmp_path / "w_single" / "iter_10.pth")
    for key in b["state_dict"]:
        torch.testing.assert_close(a["state_dict"][key], b["state_dict"][key], rtol=1e-5, atol=1e-6)
    assert len(a["rng"]) == 2 and a["meta"]["world_size"] == 2
