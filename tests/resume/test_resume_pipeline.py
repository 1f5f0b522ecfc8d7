"""Pipeline parallel through tools/train.py's main on the shipped GPT-2 config: stopped on every
stage inside an accumulation window (Ctrl-C, and SIGTERM: the preemption save) and resumed with
``--resume``, the run ends bit-identical to one never stopped, the dropout streams of each stage,
the tied embedding on both ends and the saved gradients included; and a pipeline checkpoint
resumes in one process (DCP reshards it) as one process would have continued, and under another
pipeline layout.

The two stages are forked ranks (spawn_ranks) that run their runs in one process group
(resume_helpers.runs_in_turn); one-process runs are tools/train.py in-process (run_tool).
"""

import pytest
import resume_helpers as rh
from test_resume_fsdp import shards
from test_resume_tp import CONFIG as TP_CONFIG
from test_resume_tp import K, N, straight_stopped_resumed

from libai.checkpoint import load_checkpoint

# test_resume_tp's run, its model line made a template: the blocks and the dropout vary here
CONFIG = TP_CONFIG.replace(
    "model = dict(num_layers=2, hidden_size=64, num_heads=4)  # dropout 0.1 kept: per-rank streams",
    "model = dict(num_layers={layers}, hidden_size=64, num_heads=4, hidden_dropout={dropout}, "
    "attention_dropout={dropout})")
assert "{layers}" in CONFIG


def configs(tmp_path, parallel, dropout=0.1, layers=2, **hook):
    """The plain config and the one that stops after iteration K (InterruptAtHook)."""
    plain, stopping = tmp_path / "plain.py", tmp_path / "stopping.py"
    fill = dict(root=rh.ROOT, n=N, k=K, parallel=parallel, dropout=dropout, layers=layers)
    plain.write_text(CONFIG.format(**fill, hooks=[]))
    stopping.write_text(CONFIG.format(**fill, hooks=[dict(type="InterruptAtHook", at=K, **hook)]))
    return plain, stopping


@pytest.mark.parametrize("schedule,signame,status",
                         [("1f1b", None, 130), ("gpipe", "SIGTERM", 143)],  # Ctrl-C, preemption
                         ids=["1f1b-ctrl_c", "gpipe-sigterm"])
def test_pipeline_resume_is_bit_identical(tmp_path, spawn_ranks, schedule, signame, status):
    plain, stopping = configs(tmp_path, f"pipeline=2, pipeline_schedule={schedule!r}",
                              signame=signame)
    straight, stopped, resumed = straight_stopped_resumed(spawn_ranks, tmp_path, 2, plain,
                                                          stopping)
    assert straight.returncode == 0, straight.output[-3000:]
    assert f"Pipeline: {schedule}, 2 stages" in straight.stdout
    assert stopped.returncode == status, stopped.output[-3000:]
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert f"Resumed from {tmp_path / 'resumed' / f'iter_{K}.pth'}" in resumed.output
    ckpt = load_checkpoint(tmp_path / "resumed" / f"iter_{K}.pth")
    assert ckpt["sharded"]["grads"]  # K is inside the window: the gradients so far are saved

    a = shards(tmp_path / "straight" / f"iter_{N}.pth", tmp_path)
    b = shards(tmp_path / "resumed" / f"iter_{N}.pth", tmp_path)
    assert "transformer.blocks.0.attn.q_proj.weight" in a["model"]  # the unsplit model's names
    rh.assert_same_tensors(a, b, "shards")
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", N)


def worst_difference(a, b):
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_a_pipeline_checkpoint_resumes_in_one_process_and_under_another_layout(
        tmp_path, spawn_ranks, run_tool):
    """Stopped under GPipe (4 blocks cut 3 + 1, by parameters), the checkpoint resumes in one
    process (DCP reshards it) and, in another work dir, under interleaved 1F1B (4 stages of one
    block, two per process): each process reads other parts of the checkpoint than it wrote,
    and both runs end where one process ends."""
    plain, stopping = configs(tmp_path, "pipeline=2, pipeline_schedule='gpipe'", dropout=0.0,
                              layers=4)
    one, other = tmp_path / "one.py", tmp_path / "interleaved.py"
    text = plain.read_text()
    one.write_text(text.replace("parallel = dict(pipeline=2, pipeline_schedule='gpipe')",
                                "parallel = None"))
    other.write_text(text.replace("pipeline_schedule='gpipe'",
                                  "pipeline_schedule='interleaved_1f1b'"))
    work, interleaved = tmp_path / "stopped", tmp_path / "interleaved"
    stop = work / f"iter_{K}.pth"
    stopped, resumed = rh.runs_in_turn(
        spawn_ranks, 2,
        [stopping, "--work-dir", work],
        [other, "--work-dir", interleaved, "--resume", stop])
    assert stopped.returncode == 130, stopped.output[-3000:]
    assert "blocks 0-2 + first part; stage 1 (rank 1): block 3 + last part" in stopped.stdout
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert "Pipeline: interleaved_1f1b, 4 stages over 2 processes" in resumed.stdout
    assert f"Resumed from {stop}" in resumed.output

    straight = run_tool("tools/train.py", one, "--work-dir", tmp_path / "straight")
    assert straight.returncode == 0, straight.output[-3000:]
    alone = run_tool("tools/train.py", one, "--work-dir", work, "--resume")
    assert alone.returncode == 0, alone.output[-3000:]
    assert "resharded on load" in alone.stdout

    a = load_checkpoint(tmp_path / "straight" / f"iter_{N}.pth")["state_dict"]
    b = load_checkpoint(work / f"iter_{N}.pth")["state_dict"]
    assert worst_difference(a, b) < 1e-5  # a pipeline computes within rounding of one process
    b = shards(interleaved / f"iter_{N}.pth", tmp_path)["model"]
    assert worst_difference(a, b) < 1e-5
