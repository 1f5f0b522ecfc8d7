"""Ctrl-C (SIGINT) while training saves the step reached, as SIGTERM does; a second Ctrl-C exits
at once. Through tools/train.py on configs/digits_mlp.py, the SIGINT sent by the process to itself
mid-step (SignalAtHook of test_preemption), then `--resume`: the final weights and every logged
row are bit-identical to a run never interrupted.

The signalled runs are real processes (the exit status and what reaches the terminal are the
claim); the straight run and the resume run tools/train.py in-process (run_tool).
"""

import os
import re

import resume_helpers as rh
from test_preemption import SECOND_SIGNAL

from libai.checkpoint import load_checkpoint, read_latest

N = 12
SHORT = ["train_cfg.max_iters=12", "train_cfg.val_interval=6", "default_hooks.logger.interval=1",
         "default_hooks.checkpoint.save_best=None", "+default_hooks.logger.plot=False"]


def signalled(run_process, tmp_path, work, *args):
    """tools/train.py on digits_mlp in a real process, SignalAtHook registered."""
    driver = tmp_path / "driver.py"
    driver.write_text(SECOND_SIGNAL.format(tests=os.path.dirname(__file__), tool=rh.TRAIN_TOOL))
    return run_process(driver, "configs/digits_mlp.py", "--work-dir", work, *args, timeout=300)


def rows(work):
    return [{k: v for k, v in r.items() if k not in rh.NOT_COMPARED} for r in rh.read_scalars(work)]


def test_ctrl_c_saves_the_step_and_resume_is_bit_identical(tmp_path, run_process, run_tool):
    work = tmp_path / "w"
    hook = "+custom_hooks=[{'type':'SignalAtHook','moment':'step','at':5,'signame':'SIGINT'}]"
    out = signalled(run_process, tmp_path, work, "--cfg-options", *SHORT, hook)
    assert out.returncode == 130, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "error:" not in out.stderr
    assert "libai: Ctrl-C: finishing this step and saving it" in out.stderr
    assert "Stopped by SIGINT at iteration 5 of 12" in out.stdout + out.stderr
    assert load_checkpoint(read_latest(work))["loop"]["iter"] == 5

    straight = tmp_path / "straight"
    run_tool("tools/train.py", "configs/digits_mlp.py", "--work-dir", straight,
             "--cfg-options", *SHORT).check()
    resumed = run_tool("tools/train.py", "configs/digits_mlp.py", "--work-dir", work, "--resume",
                       "--cfg-options", *SHORT).check()
    assert f"Resumed from {work / 'iter_5.pth'}" in resumed.output
    ref = load_checkpoint(straight / f"iter_{N}.pth")["state_dict"]
    got = load_checkpoint(work / f"iter_{N}.pth")["state_dict"]
    rh.assert_same_tensors(ref, got, "state_dict")
    assert rows(work) == rows(straight)


def test_second_ctrl_c_exits_at_once(tmp_path, run_process):
    work = tmp_path / "w"
    hook = ("+custom_hooks=[{'type':'SignalAtHook','moment':'step','at':3,'signame':'SIGINT',"
            "'times':2,'gap':1.2}]")  # a person reads the Ctrl-C line, then presses it again
    out = signalled(run_process, tmp_path, work, "--cfg-options", *SHORT, hook)
    assert out.returncode == 130, out.stderr[-3000:]
    assert "second signal (SIGINT): exiting at once with status 130" in out.stderr
    assert "Traceback" not in out.stderr and "Stopped by" not in out.stdout + out.stderr
    assert read_latest(work) is None and not list(work.glob("*.pth"))


def test_a_forked_data_loader_worker_leaves_ctrl_c_to_the_main_process():
    """A terminal's Ctrl-C reaches the whole process group; forked workers inherit the handler,
    which must neither print nor record there (nor exit on a second one), and the wakeup fd,
    which they must not write to (the main process would stamp their Ctrl-C as its own)."""
    import signal

    from libai.utils.signals import StopRequest

    stop = StopRequest(["SIGINT"])
    assert stop.install()
    try:
        pid = os.fork()
        if pid == 0:  # the worker
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            os._exit(0 if stop.received == 0 and signal.set_wakeup_fd(-1) == -1 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert stop.poll() == 0  # the main process saw nothing
        assert not stop._arrivals.times(stop.signals)  # nor stamped a Ctrl-C (SIGCHLD may be)
    finally:
        stop.uninstall()


def test_a_signal_relayed_within_a_second_is_the_same_request(monkeypatch):
    """In-process, on a fake clock: SIGTERM 0.05 s after SIGINT (torchrun's agent relaying one
    Ctrl-C a second time) is the same request; a signal SAME_REQUEST_S or more after the first
    is a second request and exits at once with 128 + its number."""
    import signal
    from types import SimpleNamespace

    from libai.utils import signals

    now = [100.0]
    monkeypatch.setattr(signals, "time", SimpleNamespace(monotonic=lambda: now[0]), raising=False)

    class Exited(Exception):
        pass

    def fake_exit(status):
        raise Exited(status)

    monkeypatch.setattr(signals.os, "_exit", fake_exit)
    stop = signals.StopRequest(["SIGINT", "SIGTERM"])
    assert stop.install()
    try:
        assert stop.poll() == 0  # the loop's first poll: training has started
        signal.raise_signal(signal.SIGINT)
        now[0] += 0.05
        signal.raise_signal(signal.SIGTERM)
        assert stop.poll() == signal.SIGINT  # still the first request, nothing exited
        now[0] += signals.SAME_REQUEST_S
        try:
            signal.raise_signal(signal.SIGTERM)
        except Exited as e:
            assert e.args == (143,)
        else:
            raise AssertionError("a second request did not exit")
    finally:
        stop.uninstall()


def test_ctrl_c_before_the_first_step_stops_at_once_with_nothing_to_save(tmp_path, run_tool):
    """Ctrl-C before the loop's first step (here in a before_train hook, after the model, the
    data and the hooks are built): no in-training line, no iteration-0 stop, one line, 130."""
    import test_preemption  # noqa: F401 - registers SignalAtHook

    work = tmp_path / "w"
    hook = "+custom_hooks=[{'type':'SignalAtHook','moment':'start','signame':'SIGINT'}]"
    out = run_tool("tools/train.py", "configs/digits_mlp.py", "--work-dir", work,
                   "--cfg-options", *SHORT, hook)
    assert out.returncode == 130, out.output[-3000:]
    assert "interrupted before training started; nothing to save" in out.stderr
    assert "finishing this step" not in out.output and "Stopped by" not in out.output
    assert "Iter [" not in out.output and not list(work.glob("*.pth"))


AGENT_CTRL_C = '''
import os
import signal
import time

from libai.hooks import Hook


class AgentCtrlCHook(Hook):
    """Rank 0 presses Ctrl-C after iteration `at`: SIGINT to torchrun's process group, as a
    terminal does (torchrun starts each worker in a session of its own: the signal reaches the
    agent alone, which passes SIGINT on to every worker). Once this rank has it, the agent gets
    the same Ctrl-C a second time, as from a wrapper in the terminal's group that relays signals
    to its child (or a second press): the agent, waiting for its workers, then sends them SIGTERM
    within milliseconds."""

    priority = "LOWEST"

    def __init__(self, at):
        self.at = at

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.rank == 0 and runner.iter + 1 == self.at:
            agent = os.getppid()
            os.killpg(os.getpgid(agent), signal.SIGINT)
            deadline = time.monotonic() + 30
            while not runner.stop_request.received and time.monotonic() < deadline:
                time.sleep(0.01)  # the agent has passed it on: it now waits for its workers
            os.kill(agent, signal.SIGINT)

    def before_save_checkpoint(self, runner, checkpoint=None):
        if checkpoint["meta"]["iter"] >= self.at:
            time.sleep(1.0)  # a save that takes a while: the agent waits for it
'''


def test_one_ctrl_c_under_torchrun_saves_the_step_on_every_rank(tmp_path, torchrun):
    """One Ctrl-C reaches torchrun's process group: the workers get SIGINT, and SIGTERM right
    after it when the agent gets the Ctrl-C twice. Either way they agree on a step, write its
    checkpoint and stop, while the agent waits for them: the SIGTERM is the same request."""
    from test_preemption_ddp import CONFIG

    (tmp_path / "agent_ctrl_c.py").write_text(AGENT_CTRL_C)
    config = tmp_path / "cfg.py"
    config.write_text(CONFIG.format(n=12, hooks=[dict(type="agent_ctrl_c.AgentCtrlCHook", at=5)]))
    work = tmp_path / "w"
    # torchrun as a terminal's job: a process group (and session) of its own
    run = torchrun(2, rh.TRAIN_TOOL, config, "--work-dir", work, env=rh.pythonpath(tmp_path),
                   launcher=("--monitor-interval", "0.1"), timeout=300, start_new_session=True)
    log = run.output
    assert run.returncode != 0
    assert "closing signal SIGINT" in log and "closing signal SIGTERM" in log, log[-5000:]
    assert "second signal" not in log, log[-5000:]
    stopped = re.findall(r"Stopped by SIGINT at iteration (\d+) of 12: checkpoint", log)
    assert len(stopped) == 2 and stopped[0] == stopped[1], log[-5000:]  # the ranks agree
    assert log.count("libai: Ctrl-C: finishing this step") == 1  # rank 0 says it, once
    assert log.count("the same request passed on again") == 1
    at = int(stopped[0])
    ckpt = load_checkpoint(work / f"iter_{at}.pth")  # complete: the manifest verifies
    assert at >= 5 and ckpt["loop"]["iter"] == at and len(ckpt["rng"]) == 2


def test_ctrl_c_while_the_run_is_built_says_nothing_was_trained(tmp_path, run_tool, monkeypatch):
    """Ctrl-C before train() installs its handler (Runner.from_cfg, the test set): the same line
    as above, not "checkpoints written so far are complete"."""
    from libai.cli import train

    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train.Runner, "from_cfg", pressed)
    out = run_tool("tools/train.py", "configs/digits_mlp.py", "--work-dir", tmp_path / "w")
    assert out.returncode == 130
    assert out.stderr.strip() == "interrupted before training started; nothing to save (Ctrl-C)."


def test_a_relayed_signal_is_timed_by_its_arrival_not_by_its_handler():
    """A rank waiting in a collective runs no Python handler until the collective returns: the
    SIGTERM torchrun relays 10 ms after SIGINT reached the process in time, but its handler runs
    1.5 s later. It is the same request (timed when it came, by the wakeup fd's stamps). In a
    forked child, so that the old behaviour (os._exit(143)) ends the child, not the test."""
    import signal
    import threading
    import time

    from libai.utils.signals import StopRequest

    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            stop = StopRequest(["SIGINT", "SIGTERM"])
            stop.install()
            stop.poll()  # training has started
            os.kill(os.getpid(), signal.SIGINT)  # handled at once
            time.sleep(0.05)
            # the main thread in C for 1.5 s (as in a collective): SIGTERM blocked here reaches
            # another thread, whose C handler stamps it; the Python handler waits for the main
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGTERM)).start()
            time.sleep(1.5)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            time.sleep(0.05)  # the handler runs here
            status = 0 if stop.received == signal.SIGINT else 2
            stop.uninstall()
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # 143: taken as a second request, exited
