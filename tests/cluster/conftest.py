"""A real Slurm for the tests of this folder: the one ``.ci/slurm_up.sh`` starts (munged,
slurmctld and slurmd on localhost, one node of 2 CPUs, its config in a folder of its own).

``slurm`` gives a test the cluster (its ``SLURM_CONF``), and marks the test slow: it asks for
``run_process``, one of the fixtures that do (tests/conftest.py). Where ``$SLURM_CONF`` names a
running cluster (CI: ``.ci/run`` starts it before the test line) that one is used; otherwise the
script starts one in ``/tmp/libai-slurm`` when Slurm's commands are installed and this is root,
and the test is skipped, with the reason, where they are not.

The daemons stay up after the session, for the next run and for the other xdist workers (which
find them running); outside xdist a session that started them stops them at its end.
``.ci/slurm_up.sh --stop /tmp/libai-slurm`` stops them by hand.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UP = ROOT / ".ci" / "slurm_up.sh"
DEFAULT_DIR = "/tmp/libai-slurm"
COMMANDS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel")


def _running(conf: str) -> bool:
    env = {**os.environ, "SLURM_CONF": conf}
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20,
                              env=env)
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                               timeout=20, env=env)
    except (OSError, subprocess.SubprocessError):
        return False
    return "UP" in ping.stdout and any(s in state.stdout for s in ("idle", "mix", "alloc"))


def _start() -> tuple[str | None, str, bool]:
    """(SLURM_CONF or None, why not, whether this process started the daemons)."""
    conf = os.environ.get("SLURM_CONF")
    if conf and shutil.which("scontrol") and _running(conf):
        return conf, "", False
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        return None, (f"Slurm is not installed here ({', '.join(missing)} not found): "
                      f"`.ci/slurm_up.sh --install` installs Debian's slurm-wlm and munge and "
                      f"starts them (.ci/run does)"), False
    if os.geteuid() != 0:
        return None, "a test Slurm needs root (slurmd starts jobs as their user)", False
    conf = os.path.join(DEFAULT_DIR, "slurm.conf")
    os.makedirs(DEFAULT_DIR, exist_ok=True)
    with open(DEFAULT_DIR + ".lock", "w") as lock:  # xdist workers: one starts it, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _running(conf):
            return conf, "", False
        up = subprocess.run(["bash", str(UP), DEFAULT_DIR], capture_output=True, text=True,
                            timeout=120)
    if up.returncode != 0:
        why = (up.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"the test Slurm did not start: {why}", False
    return conf, "", True


@pytest.fixture(scope="session")
def slurm_cluster():
    """The cluster's ``SLURM_CONF``; skips with the reason where none can run."""
    conf, why, started = _start()
    if conf is None:
        pytest.skip(why)
    yield conf
    if started and "PYTEST_XDIST_WORKER" not in os.environ:
        subprocess.run(["bash", str(UP), "--stop", os.path.dirname(conf)], timeout=60)


@pytest.fixture
def slurm(slurm_cluster, run_process):
    """The test Slurm's ``SLURM_CONF`` (the session's cluster); a test that asks for it is slow
    (through ``run_process``: it starts processes)."""
    return slurm_cluster
