"""tools/lr_find.py: the LR range test, as a user runs it: once as a process of its own (where the
runner's temporary work dir goes is the process's TMPDIR), the other cases in this process
(run_tool: the same main(argv))."""

import importlib.util
import math
import os
import re

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "lr_find.py")
DIGITS = os.path.join(ROOT, "configs", "digits_mlp.py")
# the train command that sets the suggested lr: printed once (issue 27)
SUGGESTION = re.compile(r"^  python tools/train\.py .*--cfg-options .*optim_wrapper\.optimizer\.lr=(\S+)$",
                        re.M)


def load_tool():
    spec = importlib.util.spec_from_file_location("lr_find_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_suggests_lr_writes_plot_and_leaves_no_files(run_process, tmp_path):
    cwd, tmp, work = tmp_path / "cwd", tmp_path / "tmp", tmp_path / "work"
    cwd.mkdir()
    tmp.mkdir()
    env = dict(TMPDIR=str(tmp))  # where the runner's temporary work dir goes
    plot = tmp_path / "plots" / "lr.png"
    out = run_process(TOOL, DIGITS, "--num-iters", "40", "--out", plot,
                      "--cfg-options", f"work_dir={work}", "train_dataloader.batch_size=64",
                      cwd=cwd, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    match = SUGGESTION.search(out.stdout)
    assert match, out.stdout
    lr = float(match.group(1))
    assert 1e-7 <= lr <= 10 and math.isfinite(lr)
    assert f"Suggested lr {match.group(1)}" in out.stdout
    assert out.stdout.count("optim_wrapper.optimizer.lr=") == 1  # the flag once, in the command
    # the full train command keeps the other options and adds the lr
    assert "train_dataloader.batch_size=64" in out.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    assert not work.exists()  # no run folder, log or checkpoint anywhere
    assert os.listdir(cwd) == []
    # the runner's temporary work dir is gone (torch may keep its own caches there)
    assert not [name for name in os.listdir(tmp) if name.startswith("libai_lr_find_")]


def test_accumulation_and_amp_on_a_toy_config(run_tool, tmp_path):
    cfg = tmp_path / "toy.py"
    cfg.write_text(
        "from libai.testing import toy_config\n"
        "globals().update(toy_config(work_dir='unused_work_dir'))\n"
        "optim_wrapper = dict(type='OptimWrapper', accumulative_counts=2,\n"
        "                     optimizer=dict(type='SGD', lr=0.1, momentum=0.9))\n")
    out = run_tool(TOOL, cfg, "--amp", "--num-iters", "30", "--start-lr", "1e-5", "--end-lr",
                   "100", "--out", tmp_path / "toy.png", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "AmpOptimWrapper" in out.stdout and "accumulative_counts=2" in out.stdout
    assert SUGGESTION.search(out.stdout) and (tmp_path / "toy.png").exists()
    assert "tools/train.py" in out.stdout and "--amp" in out.stdout
    assert sorted(os.listdir(tmp_path)) == ["toy.png", "toy.py"]


def test_bad_input_is_one_line(run_tool, tmp_path):
    out = run_tool(TOOL, DIGITS, "--start-lr", "1", "--end-lr", "0.1", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: --end-lr (0.1) must be larger than --start-lr (1.0)."]
    out = run_tool(TOOL, DIGITS, "--cfg-options", "optim_wrapper.optimizer.lrr=1", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "Did you mean 'lr'" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert os.listdir(tmp_path) == []


def test_suggestion_is_the_steepest_descent_before_the_minimum():
    tool = load_tool()
    lrs = [tool.lr_at(i, 100, 1e-6, 1.0) for i in range(100)]
    x = np.log10(lrs)
    # flat, then a fall steepest at lr 1e-3, a minimum at 1e-2, then a rise; a noise spike
    # after the minimum falls even more steeply, and must not be chosen
    loss = 2.0 - 1.5 / (1 + np.exp(-4 * (x + 3))) + np.where(x > -2, 3 * (x + 2) ** 2, 0)
    loss[85] += 5.0
    steepest, lowest = tool.suggest(lrs, list(loss))
    assert abs(x[steepest] - (-3)) < 0.15
    assert abs(x[lowest] - (-2)) < 0.3
    assert tool.lr_at(0, 100, 1e-6, 1.0) == 1e-6 and math.isclose(lrs[-1], 1.0)
