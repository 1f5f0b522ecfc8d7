"""One run at a time in a work dir (libai/utils/run_lock.py): a second run is refused with one line
naming the first, before it writes anything; a lock left by a killed run does not block; the lock
goes when the run ends, after an error too."""

import json
import os
import signal
import socket
import time
from types import SimpleNamespace

import pytest

from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.errors import ConfigError
from libai.utils.run_layout import run_folders
from libai.utils.run_lock import LOCK_NAME, _process_identity, acquire, holder


def write_lock(work, pid, host=None, process=None):
    os.makedirs(work, exist_ok=True)
    record = dict(pid=pid, host=host or socket.gethostname(), token="t", started="2026-11-26 08:00:00",
                  command="tools/train.py configs/digits_mlp.py", process=process)
    with open(os.path.join(work, LOCK_NAME), "w") as f:
        json.dump(record, f)


def cfg(work):
    return toy_config(work_dir=str(work), train_cfg=dict(max_iters=2, val_interval=10),
                      default_hooks=dict(logger=dict(plot=False)))  # no plot process


def fork(seconds: float) -> int:
    """A process of this host that lives ``seconds``: a fork, no interpreter to start."""
    pid = os.fork()
    if pid == 0:  # the child: sleeps, then exits without ever returning into pytest
        try:
            time.sleep(seconds)
        finally:
            os._exit(0)
    return pid


@pytest.fixture
def other_run():
    """A live process standing for a run that holds a work dir."""
    pid = fork(60)
    yield SimpleNamespace(pid=pid)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_second_run_is_refused_naming_the_first_and_writes_nothing(tmp_path, other_run):
    work = tmp_path / "w"
    write_lock(work, other_run.pid)
    with pytest.raises(ConfigError) as info:
        Runner.from_cfg(cfg(work))
    line = str(info.value)
    assert "\n" not in line
    assert f"is in use by another run: PID {other_run.pid} on this host, started 2026-11-26 08:00:00" in line
    assert "tools/train.py configs/digits_mlp.py" in line and "--work-dir" in line
    assert run_folders(str(work)) == [] and holder(str(work))["pid"] == other_run.pid


def test_a_lock_from_another_host_blocks_and_says_which_file_to_delete(tmp_path):
    work = tmp_path / "w"
    write_lock(work, 1, host="elsewhere-node-7")
    with pytest.raises(ConfigError, match=r"PID 1 on host elsewhere-node-7.*If that run is gone, "
                                          r"delete .*\.libai_lock"):
        acquire(str(work))


def test_a_stale_lock_of_a_killed_run_does_not_block(tmp_path, capfd):
    gone = fork(0)
    os.waitpid(gone, 0)  # ended and reaped: its PID names no process
    work = tmp_path / "w"
    write_lock(work, gone)
    runner = Runner.from_cfg(cfg(work))
    assert holder(str(work))["pid"] == os.getpid()
    assert f"the run that held it (PID {gone}" in capfd.readouterr().err
    runner.train()
    runner.close()
    assert holder(str(work)) is None


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux's /proc")
def test_a_pid_reused_by_another_process_does_not_block(tmp_path, other_run):
    """The lock's PID is alive but is not the process that wrote it (a reboot, PIDs reused)."""
    write_lock(tmp_path, other_run.pid, process="another-boot:12345")
    acquire(str(tmp_path)).release()
    write_lock(tmp_path, other_run.pid, process=_process_identity(other_run.pid))
    with pytest.raises(ConfigError, match=f"PID {other_run.pid} on this host"):
        acquire(str(tmp_path))


def test_same_process_runs_one_after_the_other(tmp_path):
    work = tmp_path / "w"
    first = Runner.from_cfg(cfg(work))
    second = Runner.from_cfg(cfg(work))  # a script building two runners in one work dir
    first.close()  # the earlier runner's release leaves the later one's lock alone
    assert holder(str(work))["pid"] == os.getpid()
    second.train()  # training over: the lock is given back, also without close()
    assert holder(str(work)) is None


def test_a_fast_dev_run_takes_no_lock(tmp_path, other_run):
    work = tmp_path / "w"
    write_lock(work, other_run.pid)
    Runner.from_cfg(cfg(work), fast_dev_run=1).train()


LOCK_THEN = """
import os, sys
from libai.utils.run_lock import acquire
lock = acquire(sys.argv[1])
{end}
"""


@pytest.mark.parametrize("end, left", [
    ("raise RuntimeError('a bug')", False),
    ("raise SystemExit(2)", False),
    ("os._exit(137)", True),  # as kill -9: the file stays, stale
])
def test_released_at_exit_also_on_error(tmp_path, end, left, run_process):
    """What happens as the interpreter exits: a process of its own (it imports no torch)."""
    work = tmp_path / "w"
    out = run_process("-c", LOCK_THEN.format(end=end), work, timeout=60)
    assert out.returncode != 0
    assert (holder(str(work)) is not None) is left
    acquire(str(work)).release()  # a stale one does not block


def test_train_tool_refuses_a_busy_work_dir_in_one_line(tmp_path, other_run, run_tool):
    work = tmp_path / "w"
    write_lock(work, other_run.pid)
    out = run_tool("tools/train.py", "configs/digits_mlp.py", "--work-dir", work)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: {work} is in use by another "
                                                          f"run: PID {other_run.pid} on this host")
    assert run_folders(str(work)) == []
