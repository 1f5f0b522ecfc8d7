"""tools/train.py and tools/test.py end to end, as a user runs them."""

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from libai.utils.run_layout import wait_for_plots

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICK = os.path.join(ROOT, "configs", "digits_mlp.py")


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    work = tmp_path_factory.mktemp("digits")
    out = run("tools/train.py", QUICK, "--work-dir", str(work), "--cfg-options",
              "train_cfg.max_iters=300", "train_cfg.val_interval=150",
              "default_hooks.checkpoint.interval=150", "default_hooks.logger.interval=50")
    assert out.returncode == 0, out.stdout + out.stderr
    return work, out.stdout + out.stderr


def test_train_writes_logs_checkpoints_and_tensorboard(trained):
    work, log = trained
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
    wait_for_plots(str(work))  # the plots come from a background process, a second or so later
    assert os.path.getsize(run_dir / "plots" / "loss.png") > 1000
    assert os.path.getsize(run_dir / "plots" / "overview.png") > 1000


def test_test_tool_evaluates_and_dumps(trained, tmp_path):
    work, _ = trained
    dump = tmp_path / "preds.pt"
    out = run("tools/test.py", QUICK, str(work / "iter_300.pth"), "--work-dir", str(tmp_path),
              "--dump", str(dump))
    assert out.returncode == 0, out.stdout + out.stderr
    acc = float(re.search(r"Test metrics: test/accuracy: ([0-9.]+)", out.stdout + out.stderr)[1])
    assert acc > 0.85, acc  # 300 iterations, on the held-out test split
    assert "Test (iteration 300)" in out.stdout + out.stderr  # the checkpoint's iteration
    preds = torch.load(dump)  # the held-out test split: 15% of the 1,797 images
    assert preds["logits"].shape == (270, 10) and preds["labels"].shape == (270,)
    assert (preds["logits"].argmax(1) == preds["labels"]).float().mean() == pytest.approx(acc, abs=1e-4)


def test_typo_in_cfg_options_is_one_line_with_suggestion(tmp_path):
    out = run("tools/train.py", QUICK, "--work-dir", str(tmp_path), "--cfg-options",
              "train_cfg.max_iter=5")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "max_iter" in out.stderr and "Did you mean 'max_iters'" in out.stderr


def test_unknown_type_in_config_file(tmp_path):
    cfg = tmp_path / "typo.py"
    cfg.write_text(f"_base_ = {QUICK!r}\nmodel = dict(type='DigitMLP')\n")
    out = run("tools/train.py", str(cfg), "--work-dir", str(tmp_path / "w"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "Did you mean 'DigitsMLP'" in out.stderr


def test_missing_config_file_and_debug_traceback(tmp_path):
    out = run("tools/train.py", "configs/no_such.py")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no_such.py" in out.stderr
    out = run("tools/train.py", "configs/no_such.py", "--debug")
    assert "Traceback" in out.stderr


def test_fast_dev_run(tmp_path):
    out = run("tools/train.py", QUICK, "--work-dir", str(tmp_path), "--fast-dev-run")
    assert out.returncode == 0, out.stderr
    # the lines count to where the dry run stops, not to the config's 2000 (issue 27)
    assert "Iter [2/2]" in out.stdout + out.stderr and "/2000]" not in out.stdout + out.stderr
    assert os.listdir(tmp_path) == []  # no checkpoint, run folder, scalars or plots


def test_print_config_shows_merged_config():
    out = run("tools/print_config.py", QUICK, "--cfg-options", "train_cfg.max_iters=7")
    assert out.returncode == 0, out.stderr
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
default_hooks = dict(logger=dict(interval=5), checkpoint=dict(interval=5))
randomness = dict(seed=0)
"""


@pytest.mark.slow
def test_ddp_two_processes_match_one_process_with_double_batch(tmp_path):
    """2 ranks x batch 4 see the same 8 samples per step as 1 process x batch 8."""
    for name, batch in (("ddp", 4), ("single", 8)):
        (tmp_path / f"{name}.py").write_text(DDP_CONFIG.format(batch=batch))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ddp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "tools/train.py", str(tmp_path / "ddp.py"), "--work-dir", str(tmp_path / "w_ddp")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert ddp.returncode == 0, ddp.stdout[-3000:] + ddp.stderr[-3000:]
    single = run("tools/train.py", str(tmp_path / "single.py"), "--work-dir", str(tmp_path / "w_single"))
    assert single.returncode == 0, single.stderr
    log = ddp.stdout + ddp.stderr
    assert "world size   2" in log
    run_dirs = [d for d in os.listdir(tmp_path / "w_ddp") if d[:8].isdigit()]
    assert len(run_dirs) == 1  # rank 0 alone writes logs
    a = torch.load(tmp_path / "w_ddp" / "iter_10.pth")
    b = torch.load(tmp_path / "w_single" / "iter_10.pth")
    for key in b["state_dict"]:
        torch.testing.assert_close(a["state_dict"][key], b["state_dict"][key], rtol=1e-5, atol=1e-6)
    assert len(a["rng"]) == 2 and a["meta"]["world_size"] == 2
