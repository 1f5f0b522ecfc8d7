"""Pipeline parallel through ``torchrun tools/train.py`` on the shipped GPT-2 config: stopped on
every stage inside an accumulation window (Ctrl-C, and SIGTERM: the preemption save) and resumed
with ``--resume``, the run ends bit-identical to one never stopped, the dropout streams of each
stage, the tied embedding on both ends and the saved gradients included; and a pipeline
checkpoint resumes in one process (DCP reshards it) as one process would have continued.
"""

import subprocess

import pytest
import resume_helpers as rh
from test_resume_ddp import STOP_HOOK
from test_resume_fsdp import shards
from test_resume_tp import CONFIG as TP_CONFIG

from libai.checkpoint import load_checkpoint

N, K = 6, 3  # K odd, accumulation 2: the stop falls inside a window

# test_resume_tp's run, its model line made a template: the blocks and the dropout vary here
CONFIG = TP_CONFIG.replace(
    "model = dict(num_layers=2, hidden_size=64, num_heads=4)  # dropout 0.1 kept: per-rank streams",
    "model = dict(num_layers={layers}, hidden_size=64, num_heads=4, hidden_dropout={dropout}, "
    "attention_dropout={dropout})")
assert "{layers}" in CONFIG

TERM_HOOK = '''
import os
import signal

from libai.hooks import Hook


class TermAtHook(Hook):
    """SIGTERM to this process on every rank after iteration `at`, as a cluster's preemption."""

    priority = "LOWEST"

    def __init__(self, at):
        self.at = at

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.iter + 1 == self.at:
            os.kill(os.getpid(), signal.SIGTERM)
'''


def run(tmp_path, nproc, config, work, *extra):
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)] \
        if nproc > 1 else []
    args = [rh.PYTHON, *launcher, rh.TRAIN_TOOL, str(config), "--work-dir", str(work), *extra]
    env = rh.python_env(pythonpath=str(tmp_path))
    return subprocess.run(args, cwd=rh.ROOT, env=env, capture_output=True, text=True, timeout=600)


def configs(tmp_path, parallel, hook, dropout=0.1, layers=2):
    (tmp_path / "resume_ctrl_c.py").write_text(STOP_HOOK)
    (tmp_path / "resume_term.py").write_text(TERM_HOOK)
    plain, stopping = tmp_path / "plain.py", tmp_path / "stopping.py"
    fill = dict(root=rh.ROOT, n=N, k=K, parallel=parallel, dropout=dropout, layers=layers)
    plain.write_text(CONFIG.format(**fill, hooks=[]))
    stopping.write_text(CONFIG.format(**fill, hooks=[dict(type=hook, at=K)]))
    return plain, stopping


@pytest.mark.slow
@pytest.mark.parametrize("schedule,hook", [("1f1b", "resume_ctrl_c.CtrlCAtHook"),
                                           ("gpipe", "resume_term.TermAtHook")])
def test_pipeline_resume_is_bit_identical(tmp_path, schedule, hook):
    plain, stopping = configs(tmp_path, f"pipeline=2, pipeline_schedule={schedule!r}", hook)
    straight = run(tmp_path, 2, plain, tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert f"Pipeline: {schedule}, 2 stages" in straight.stdout
    stopped = run(tmp_path, 2, stopping, tmp_path / "resumed")
    assert stopped.returncode != 0, stopped.stderr[-3000:]
    ckpt = load_checkpoint(tmp_path / "resumed" / f"iter_{K}.pth")
    assert ckpt["sharded"]["grads"]  # K is inside the window: the gradients so far are saved
    resumed = run(tmp_path, 2, plain, tmp_path / "resumed", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    a = shards(tmp_path / "straight" / f"iter_{N}.pth", tmp_path)
    b = shards(tmp_path / "resumed" / f"iter_{N}.pth", tmp_path)
    assert "transformer.blocks.0.attn.q_proj.weight" in a["model"]  # the unsplit model's names
    rh.assert_same_tensors(a, b, "shards")
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", N)


@pytest.mark.slow
def test_a_pipeline_checkpoint_resumes_in_one_process(tmp_path):
    plain, stopping = configs(tmp_path, "pipeline=2", "resume_ctrl_c.CtrlCAtHook", dropout=0.0)
    one = tmp_path / "one.py"
    one.write_text(plain.read_text().replace("parallel = dict(pipeline=2)", "parallel = None"))
    straight = run(tmp_path, 1, one, tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    stopped = run(tmp_path, 2, stopping, tmp_path / "resumed")
    assert stopped.returncode != 0, stopped.stderr[-3000:]
    resumed = run(tmp_path, 1, one, tmp_path / "resumed", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resharded on load" in resumed.stdout

    a = load_checkpoint(tmp_path / "straight" / f"iter_{N}.pth")["state_dict"]
    b = load_checkpoint(tmp_path / "resumed" / f"iter_{N}.pth")["state_dict"]
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-5, worst  # a pipeline computes within rounding of one process


@pytest.mark.slow
def test_a_pipeline_checkpoint_resumes_under_another_layout(tmp_path):
    """Stopped under GPipe (4 blocks cut 3 + 1, by parameters), resumed under interleaved 1F1B
    (4 stages of one block, two per process): each process reads other parts of the checkpoint
    than it wrote, and the run ends where one process ends."""
    plain, stopping = configs(tmp_path, "pipeline=2, pipeline_schedule='gpipe'",
                              "resume_ctrl_c.CtrlCAtHook", dropout=0.0, layers=4)
    one, other = tmp_path / "one.py", tmp_path / "interleaved.py"
    text = plain.read_text()
    one.write_text(text.replace("parallel = dict(pipeline=2, pipeline_schedule='gpipe')",
                                "parallel = None"))
    other.write_text(text.replace("pipeline_schedule='gpipe'",
                                  "pipeline_schedule='interleaved_1f1b'"))
    straight = run(tmp_path, 1, one, tmp_path / "straight")
    assert straight.returncode == 0, straight.stderr[-3000:]
    stopped = run(tmp_path, 2, stopping, tmp_path / "resumed")
    assert stopped.returncode != 0, stopped.stderr[-3000:]
    assert "blocks 0-2 + first part; stage 1 (rank 1): block 3 + last part" in stopped.stdout
    resumed = run(tmp_path, 2, other, tmp_path / "resumed", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Pipeline: interleaved_1f1b, 4 stages over 2 processes" in resumed.stdout

    a = load_checkpoint(tmp_path / "straight" / f"iter_{N}.pth")["state_dict"]
    b = shards(tmp_path / "resumed" / f"iter_{N}.pth", tmp_path)["model"]
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-5, worst
