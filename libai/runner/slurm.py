"""Slurm as a launcher: ``srun python tools/train.py CONFIG`` without torchrun, and a job that
requeues itself when it is asked to stop before its time limit.

Under ``srun`` every task is one process of the run. Slurm tells each task who it is
(``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_STEP_NUM_TASKS``, the node list); torch's
``env://`` initialisation reads torchrun's names (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``). :func:`adopt_environment` writes the second from the first
when a task starts without torchrun's variables, so the rest of libai sees one launcher's
environment whichever started it. Where torchrun runs under Slurm (one ``srun`` task per node
starting ``torchrun``) torchrun's variables are set and this module leaves them alone.

Preemption (docs/cluster.md): Slurm's ``--signal=USR1@120`` asks the steps to stop two minutes
before the time limit. The runner saves the step on every rank (:mod:`libai.runner.preemption`),
then global rank 0 asks Slurm to run the job again (:func:`requeue`), once; the requeued job
(``SLURM_RESTART_COUNT`` > 0) resumes from that checkpoint when it is started with ``--resume``,
which ``tools/slurm_train.sh`` adds. Only SIGUSR1 requeues: SIGTERM is also what ``scancel``
sends, and a job that requeued itself on it could never be cancelled (a job Slurm preempts with
``PreemptMode=REQUEUE`` is requeued by Slurm itself).

>>> env = {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_STEP_NUM_TASKS": "4",
...        "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "4242", "SLURM_NODEID": "1",
...        "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_NODELIST": "gpu[07-08]"}
>>> v = torchrun_variables(env)
>>> v["RANK"], v["LOCAL_RANK"], v["WORLD_SIZE"], v["LOCAL_WORLD_SIZE"], v["MASTER_ADDR"]
('3', '1', '4', '2', 'gpu07')
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, MutableMapping
from typing import Any

__all__ = ["REQUEUE_SIGNALS", "adopt_environment", "first_host", "in_srun_step", "master_port",
           "requeue", "restart_count", "summary", "torchrun_variables"]

# The signal Slurm's --signal sends before the time limit; see the module docstring for SIGTERM.
REQUEUE_SIGNALS = ("SIGUSR1",)
# torchrun's variables: any one of them set means torchrun (or the user) launched this process
_TORCHRUN_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    value = environ.get(name, "")
    return int(value) if value.strip().isdigit() else default


def in_srun_step(environ: Mapping[str, str] = os.environ) -> bool:
    """True in a task started by ``srun`` (a job step), False in the batch script itself, which
    Slurm gives ``SLURM_PROCID=0`` and the job's task count but no step."""
    return "SLURM_STEP_ID" in environ and "SLURM_PROCID" in environ and "SLURM_JOB_ID" in environ


def _have_scontrol() -> bool:
    return shutil.which("scontrol") is not None


def _scontrol(*args: str) -> str:
    """``scontrol ARGS``'s output; raises CalledProcessError on a non-zero status."""
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60,
                          check=True).stdout


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list (``gpu[07-08,11],cpu3`` -> ``gpu07``): the one that
    hosts the rendezvous. ``scontrol show hostnames`` expands the list where Slurm's commands
    are installed; the common forms are expanded here otherwise."""
    nodelist = nodelist.strip()
    if "[" not in nodelist:
        return nodelist.split(",")[0]
    if _have_scontrol():
        try:
            out = _scontrol("show", "hostnames", nodelist).split()
            if out:
                return out[0]
        except (OSError, subprocess.SubprocessError):
            pass  # expanded below
    match = re.match(r"([^\[,]*)\[([^\]\-,]+)", nodelist)
    return match.group(1) + match.group(2) if match else nodelist.split(",")[0]


def master_port(job_id: int, step_id: int = 0) -> int:
    """A port of the job's own for the rendezvous, from its id and step (10000-29999: below
    Linux's ephemeral ports, so no outgoing connection holds it), the same in every task."""
    return 10000 + (job_id % 1999) * 10 + step_id % 10


def _tasks_on_node(spec: str, node: int) -> int | None:
    """``SLURM_STEP_TASKS_PER_NODE`` (``2(x3),1``) read for node index ``node``."""
    counts: list[int] = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            return None
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts[node] if 0 <= node < len(counts) else None


def torchrun_variables(environ: Mapping[str, str] = os.environ) -> dict[str, str] | None:
    """torchrun's variables for this ``srun`` task, from Slurm's; None when torchrun's are set
    already, outside a job step, or for a step of one task (a single process: nothing to join).

    ``MASTER_ADDR`` and ``MASTER_PORT`` of the environment are kept (a port chosen by the user
    wins); otherwise the first host of the node list and :func:`master_port`.
    """
    if any(name in environ for name in _TORCHRUN_NAMES) or not in_srun_step(environ):
        return None
    world = _int(environ, "SLURM_STEP_NUM_TASKS", _int(environ, "SLURM_NTASKS", 1))
    rank = _int(environ, "SLURM_PROCID")
    if world is None or world <= 1 or rank is None:
        return None
    local = _int(environ, "SLURM_LOCALID", 0)
    node = _int(environ, "SLURM_NODEID", 0) or 0
    per_node = _tasks_on_node(environ.get("SLURM_STEP_TASKS_PER_NODE", ""), node)
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST") or "localhost"
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(per_node or world),
        "GROUP_RANK": str(node),
        "MASTER_ADDR": environ.get("MASTER_ADDR") or first_host(nodelist),
        "MASTER_PORT": environ.get("MASTER_PORT") or str(
            master_port(_int(environ, "SLURM_JOB_ID", 0) or 0, _int(environ, "SLURM_STEP_ID", 0) or 0)),
    }


def adopt_environment(environ: MutableMapping[str, str] = os.environ) -> dict[str, str] | None:
    """Write :func:`torchrun_variables` into ``environ`` (the process's), so that the process
    group and every ``LOCAL_RANK`` reader see this task's place; return them, or None when
    there is nothing to adopt."""
    values = torchrun_variables(environ)
    if values is not None:
        environ.update(values)
    return values


def restart_count(environ: Mapping[str, str] = os.environ) -> int:
    """How many times Slurm has started this job again (``SLURM_RESTART_COUNT``; 0 the first
    time, and outside Slurm)."""
    return _int(environ, "SLURM_RESTART_COUNT", 0) or 0


def summary(resume: Any, environ: Mapping[str, str] = os.environ) -> tuple[dict[str, str], str | None]:
    """The ``slurm`` row of the log's Environment block, and a warning for a requeued job that
    was not asked to resume (it would start over and write over the checkpoints of the first
    run), or ({}, None) outside a Slurm job."""
    job = environ.get("SLURM_JOB_ID")
    if job is None:
        return {}, None
    task = (f"task {environ.get('SLURM_PROCID', '0')} of "
            f"{environ.get('SLURM_STEP_NUM_TASKS') or environ.get('SLURM_NTASKS', '1')}")
    if "TORCHELASTIC_RUN_ID" in environ:  # torchrun's agent, in one srun task per node
        where = f"torchrun in srun {task}" if in_srun_step(environ) else "torchrun"
    else:
        where = f"{task} (srun)" if in_srun_step(environ) else "batch script"
    restarts = restart_count(environ)
    row = f"job {job}, {where}"
    if restarts == 0:
        return {"slurm": row}, None
    row += f", requeued run (restart {restarts})"
    if resume:
        return {"slurm": row + ": resuming from the latest checkpoint"}, None
    return {"slurm": row}, (
        f"Slurm job {job} is a requeued run (restart {restarts}) started without --resume: it "
        f"trains from the start. Pass --resume when SLURM_RESTART_COUNT > 0 "
        f"(tools/slurm_train.sh does).")


def _job_fields(job: str) -> dict[str, str]:
    out = _scontrol("show", "job", "-o", job)
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def requeue(signal_name: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """Ask Slurm to run this job again after a stop on ``signal_name``; call it on global rank 0
    once the checkpoint is written. Returns what happened, for the stop's log line, or None
    where nothing is to be done: not in a Slurm job, a signal that does not requeue
    (:data:`REQUEUE_SIGNALS`), or a job Slurm cannot requeue (not a batch job, or submitted with
    ``--no-requeue``), whose stop is then final."""
    job = environ.get("SLURM_JOB_ID")
    if job is None or signal_name not in REQUEUE_SIGNALS:
        return None
    if not _have_scontrol():
        return f"Slurm job {job} not requeued: scontrol is not on this node's PATH"
    try:
        fields = _job_fields(job)
        if fields.get("BatchFlag") != "1" or fields.get("Requeue") != "1":
            return None
        _scontrol("requeue", job)
    except subprocess.CalledProcessError as e:
        reason = (e.stderr or e.stdout or "").strip().splitlines()
        return f"Slurm job {job} not requeued: {' '.join(e.cmd)} failed ({reason[-1] if reason else e})"
    except (OSError, subprocess.SubprocessError) as e:
        return f"Slurm job {job} not requeued: scontrol failed ({e})"
    return f"requeued Slurm job {job}: it resumes from this checkpoint (restart {restart_count(environ) + 1})"
