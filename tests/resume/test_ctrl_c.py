"""Ctrl-C (SIGINT) while training saves the step reached, as SIGTERM does; a second Ctrl-C exits
at once. Through tools/train.py on configs/digits_mlp.py in a child process, the SIGINT sent by the
process to itself mid-step (SignalAtHook of test_preemption), then `--resume`: the final weights
and every logged row are bit-identical to a run never interrupted.
"""

import os
import re
import subprocess

import pytest
import resume_helpers as rh
from test_preemption import SECOND_SIGNAL

from libai.checkpoint import load_checkpoint, read_latest

N = 12
SHORT = ["train_cfg.max_iters=12", "train_cfg.val_interval=6", "default_hooks.logger.interval=1",
         "default_hooks.checkpoint.save_best=None"]


def train_tool(tmp_path, work, *args):
    driver = tmp_path / "driver.py"
    driver.write_text(SECOND_SIGNAL.format(tests=os.path.dirname(__file__), tool=rh.TRAIN_TOOL))
    return subprocess.run(
        [rh.PYTHON, str(driver), "configs/digits_mlp.py", "--work-dir", str(work), *args],
        cwd=rh.ROOT, env=rh.python_env(), capture_output=True, text=True, timeout=300)


def rows(work):
    return [{k: v for k, v in r.items() if k not in rh.NOT_COMPARED} for r in rh.read_scalars(work)]


@pytest.mark.slow
def test_ctrl_c_saves_the_step_and_resume_is_bit_identical(tmp_path):
    straight = train_tool(tmp_path, tmp_path / "straight", "--cfg-options", *SHORT)
    assert straight.returncode == 0, straight.stderr[-3000:]

    work = tmp_path / "w"
    hook = "+custom_hooks=[{'type':'SignalAtHook','moment':'step','at':5,'signame':'SIGINT'}]"
    out = train_tool(tmp_path, work, "--cfg-options", *SHORT, hook)
    assert out.returncode == 130, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "error:" not in out.stderr
    assert "libai: Ctrl-C: finishing this step and saving it" in out.stderr
    assert "Stopped by SIGINT at iteration 5 of 12" in out.stdout + out.stderr
    assert load_checkpoint(read_latest(work))["loop"]["iter"] == 5

    resumed = train_tool(tmp_path, work, "--resume", "--cfg-options", *SHORT)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ref = load_checkpoint(tmp_path / "straight" / f"iter_{N}.pth")["state_dict"]
    got = load_checkpoint(work / f"iter_{N}.pth")["state_dict"]
    rh.assert_same_tensors(ref, got, "state_dict")
    assert rows(work) == rows(tmp_path / "straight")


@pytest.mark.slow
def test_second_ctrl_c_exits_at_once(tmp_path):
    work = tmp_path / "w"
    hook = "+custom_hooks=[{'type':'SignalAtHook','moment':'step','at':3,'signame':'SIGINT','times':2}]"
    out = train_tool(tmp_path, work, "--cfg-options", *SHORT, hook)
    assert out.returncode == 130, out.stderr[-3000:]
    assert "second signal (SIGINT): exiting at once with status 130" in out.stderr
    assert "Traceback" not in out.stderr and "Stopped by" not in out.stdout + out.stderr
    assert read_latest(work) is None and not list(work.glob("*.pth"))


def test_a_forked_data_loader_worker_leaves_ctrl_c_to_the_main_process():
    """A terminal's Ctrl-C reaches the whole process group; forked workers inherit the handler,
    which must neither print nor record there (nor exit on a second one)."""
    import signal

    from libai.utils.signals import StopRequest

    stop = StopRequest(["SIGINT"])
    assert stop.install()
    try:
        pid = os.fork()
        if pid == 0:  # the worker
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            os._exit(0 if stop.received == 0 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert stop.poll() == 0  # the main process saw nothing
    finally:
        stop.uninstall()


AGENT_CTRL_C = '''
import os
import signal
import time

from libai.hooks import Hook


class AgentCtrlCHook(Hook):
    """Rank 0 sends SIGINT to torchrun's agent (its parent) after iteration `at`, as a terminal's
    Ctrl-C does (torchrun starts each worker in a session of its own: the terminal's signal
    reaches the agent alone, which passes it on to every worker)."""

    priority = "LOWEST"

    def __init__(self, at):
        self.at = at

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.rank == 0 and runner.iter + 1 == self.at:
            os.kill(os.getppid(), signal.SIGINT)

    def before_save_checkpoint(self, runner, checkpoint=None):
        if checkpoint["meta"]["iter"] >= self.at:
            time.sleep(1.0)  # a save that takes a while: the agent waits for it
'''


@pytest.mark.slow
def test_ctrl_c_under_torchrun_saves_the_step_on_every_rank(tmp_path):
    """torchrun passes a terminal's Ctrl-C on to its workers once: they agree on a step, write
    its checkpoint and stop, while the agent waits for them."""
    from test_preemption_ddp import CONFIG

    (tmp_path / "agent_ctrl_c.py").write_text(AGENT_CTRL_C)
    config = tmp_path / "cfg.py"
    config.write_text(CONFIG.format(n=12, hooks=[dict(type="agent_ctrl_c.AgentCtrlCHook", at=5)]))
    work = tmp_path / "w"
    args = [rh.PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            "--monitor-interval", "0.1", rh.TRAIN_TOOL, str(config), "--work-dir", str(work)]
    run = subprocess.run(args, cwd=rh.ROOT, env=rh.python_env(pythonpath=str(tmp_path)),
                         capture_output=True, text=True, timeout=300, start_new_session=True)
    log = run.stdout + run.stderr
    assert run.returncode != 0
    assert "second signal" not in log, log[-5000:]
    stopped = re.findall(r"Stopped by SIGINT at iteration (\d+) of 12: checkpoint", log)
    assert len(stopped) == 2 and stopped[0] == stopped[1], log[-5000:]  # the ranks agree
    assert log.count("libai: Ctrl-C: finishing this step") == 1  # rank 0 says it, once
    at = int(stopped[0])
    ckpt = load_checkpoint(work / f"iter_{at}.pth")  # complete: the manifest verifies
    assert at >= 5 and ckpt["loop"]["iter"] == at and len(ckpt["rng"]) == 2
