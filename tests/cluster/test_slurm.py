"""Slurm as users run it (issue 38 items 2 and 3; docs/cluster.md). Device: the CPU (gloo).

The fast tests (everywhere, in-process): Slurm's variables of an ``srun`` task read as torchrun's
(rank, local rank, world size, the first host of the node list as the rendezvous), and a stop on
SIGUSR1 inside a Slurm batch job requeuing it once, from rank 0, with ``scontrol`` faked.

The slow ones need the test Slurm of ``conftest.py`` (skipped, with the reason, where it cannot
run) and submit ``tools/slurm_train.sh`` with ``sbatch``, as a user does, 2 tasks of the digits
MLP each:

- a straight job trains (its validation accuracy is read from the job's log);
- a job stopped by ``scancel --signal=USR1`` (what ``--signal=USR1@120`` sends before the time
  limit) saves its step, requeues itself, resumes, and ends with the straight job's weights and
  optimizer state, bit for bit; so does a job requeued from outside by ``scontrol requeue``
  (Slurm's SIGTERM, then Slurm's own requeue). A hook holds both at iteration ``STOP_AT`` until
  the signal has reached the process, so the stop is at a known step;
- a job given a bad config fails with one line and is not requeued.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from libai.runner import slurm as slurm_launch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "slurm_train.sh"
STEPS, EVERY, STOP_AT = 40, 10, 15
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")

SRUN_TASK = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3",
             "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_NUM_TASKS": "4",
             "SLURM_NTASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
             "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_STEP_NODELIST": "gpu[07-08]"}


# ------------------------------------------------------------------ fast: the launcher, in-process
def test_an_srun_task_is_read_as_torchrun_would_start_it(monkeypatch):
    monkeypatch.setattr(slurm_launch, "_have_scontrol", lambda: False)  # no scontrol here
    assert slurm_launch.torchrun_variables(SRUN_TASK) == {
        "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1", "MASTER_ADDR": "gpu07",
        "MASTER_PORT": str(slurm_launch.master_port(4242, 0))}
    # every task of the job computes the same rendezvous; another job or step another port
    assert slurm_launch.master_port(4242, 0) == slurm_launch.master_port(4242, 0)
    assert len({slurm_launch.master_port(j, s) for j in (4242, 4243) for s in (0, 1)}) == 4
    assert all(10000 <= slurm_launch.master_port(j, 9) < 30000 for j in (0, 1998, 10**7))
    # the user's own rendezvous wins
    mine = {**SRUN_TASK, "MASTER_ADDR": "head", "MASTER_PORT": "29500"}
    assert slurm_launch.torchrun_variables(mine)["MASTER_ADDR"] == "head"
    assert slurm_launch.torchrun_variables(mine)["MASTER_PORT"] == "29500"
    for nodelist, first in (("node3", "node3"), ("a1,b2", "a1"), ("gpu[07-08,11],cpu3", "gpu07"),
                            ("rack1-n[002,009]", "rack1-n002")):
        assert slurm_launch.first_host(nodelist) == first


def test_slurm_is_left_alone_where_it_does_not_launch_the_processes():
    # torchrun under srun (one task per node starting torchrun): torchrun's variables stand
    assert slurm_launch.torchrun_variables({**SRUN_TASK, "RANK": "0", "WORLD_SIZE": "8"}) is None
    # the batch script itself: Slurm gives it SLURM_PROCID=0 and the job's task count, no step
    batch = {k: v for k, v in SRUN_TASK.items() if "STEP" not in k} | {"SLURM_PROCID": "0"}
    assert slurm_launch.torchrun_variables(batch) is None
    # a step of one task (srun -n 1) is a single process
    one = {**SRUN_TASK, "SLURM_STEP_NUM_TASKS": "1", "SLURM_PROCID": "0"}
    assert slurm_launch.torchrun_variables(one) is None
    assert slurm_launch.torchrun_variables({}) is None
    env = dict(one)
    assert slurm_launch.adopt_environment(env) is None and env == one


def test_adopted_variables_start_a_process_group_of_the_tasks(monkeypatch):
    """What init_distributed gets from one srun task: the process's environment now holds
    torchrun's variables, which libai.utils.dist and the process group read."""
    from libai.utils import dist

    env = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_LOCALID": "1",
           "SLURM_STEP_NUM_TASKS": "2", "SLURM_JOB_NODELIST": "localhost"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                 "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, "")  # recorded, so that the test leaves none of them set
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    slurm_launch.adopt_environment()
    assert dist.launched_by_torchrun() and dist.get_local_rank() == 1
    assert (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_ADDR"]) == (
        "1", "2", "localhost")


def test_a_requeued_run_says_so_and_warns_without_resume():
    env = {"SLURM_JOB_ID": "9", "SLURM_RESTART_COUNT": "1", "SLURM_STEP_ID": "0",
           "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    row, warning = slurm_launch.summary(True, env)
    assert row == {"slurm": "job 9, task 0 of 2 (srun), requeued run (restart 1): resuming from "
                            "the latest checkpoint"} and warning is None
    row, warning = slurm_launch.summary(False, env)
    assert "started without --resume: it trains from the start" in warning
    assert slurm_launch.summary(False, {}) == ({}, None)
    under_torchrun = {**env, "SLURM_RESTART_COUNT": "0", "SLURM_STEP_NUM_TASKS": "1",
                      "TORCHELASTIC_RUN_ID": "9"}
    assert slurm_launch.summary(True, under_torchrun)[0] == {
        "slurm": "job 9, torchrun in srun task 0 of 1"}


class _FakeScontrol:
    """``scontrol show job`` and ``scontrol requeue`` as a batch job's would answer."""

    def __init__(self, fields: str) -> None:
        self.fields, self.requeued = fields, []

    def __call__(self, *args: str) -> str:
        if args[0] == "requeue":
            self.requeued.append(args[1])
        return self.fields if args[:2] == ("show", "job") else ""


def _stopped_by(signum: int, tmp_path: Path) -> str:
    """A digits run in this process, signalled during step 3; returns the stop's line."""
    from libai.config import Config
    from libai.hooks import Hook
    from libai.runner import Runner
    from libai.utils.signals import Preempted

    class SignalDuringStep3(Hook):
        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            if runner.iter + 1 == 3:
                signal.raise_signal(signum)

    cfg = Config.fromfile(str(ROOT / "configs" / "digits_mlp.py"))
    cfg.merge_from_options({"train_cfg.max_iters": 6, "work_dir": str(tmp_path / "w"),
                            "default_hooks.logger.interval": 1,
                            "+default_hooks.logger.plot": False})
    runner = Runner.from_cfg(cfg)
    runner.register_hook(SignalDuringStep3())
    with pytest.raises(Preempted) as stop:
        runner.train()
    assert runner.iter == 3 and (tmp_path / "w" / "iter_3.pth").exists()
    return str(stop.value)


@pytest.mark.parametrize("case", ["SIGUSR1 requeues", "SIGTERM does not", "not requeue-able"])
def test_a_stop_in_a_slurm_batch_job_requeues_it_once_from_rank_0(case, tmp_path, monkeypatch):
    """Device: the CPU, one process (rank 0). SIGTERM is also scancel's signal: a job that
    requeued itself on it could not be cancelled."""
    fake = _FakeScontrol("JobId=77 Requeue=0 BatchFlag=1" if case == "not requeue-able"
                         else "JobId=77 JobState=RUNNING Requeue=1 Restarts=0 BatchFlag=1")
    monkeypatch.setattr(slurm_launch, "_have_scontrol", lambda: True)
    monkeypatch.setattr(slurm_launch, "_scontrol", fake)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    line = _stopped_by(signal.SIGTERM if case == "SIGTERM does not" else signal.SIGUSR1, tmp_path)
    if case == "SIGUSR1 requeues":
        assert fake.requeued == ["77"]
        assert line.endswith("iter_3.pth. requeued Slurm job 77: it resumes from this checkpoint "
                             "(restart 1) (exit status 138)."), line
    else:
        assert fake.requeued == [] and "Continue with: " in line, line


# ------------------------------------------------------------------ slow: a real Slurm
HOLD_HOOK = '''
import time

from libai.hooks import Hook
from libai.registry import HOOKS


@HOOKS.register_module()
class HoldForSignalHook(Hook):
    """Holds the run after step ``at`` (at most 600 s) until a stop signal reaches this process,
    so that the test's signal stops it at iteration ``at``; ``flag`` tells the test it is there.
    The resumed run starts at ``at`` and is not held."""

    def __init__(self, at, flag):
        self.at, self.flag = at, flag

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.iter + 1 != self.at:
            return
        open(self.flag, "a").close()
        deadline = time.monotonic() + 600
        while runner.stop_request is not None and not runner.stop_request.received \\
                and time.monotonic() < deadline:
            time.sleep(0.05)
'''


def _config(folder: Path, hold: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"_base_ = {str(ROOT / 'configs' / 'digits_mlp.py')!r}"]
    if hold:
        (folder / "hold_for_signal.py").write_text(HOLD_HOOK)
        lines += ['custom_imports = dict(imports=["hold_for_signal"])',
                  f"custom_hooks = [dict(type='HoldForSignalHook', at={STOP_AT}, "
                  f"flag={str(folder / 'held')!r})]"]
    path = folder / "digits_slurm.py"
    path.write_text("\n".join(lines) + "\n")
    return path


def _env(conf: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "SLURM_CONF": conf, "PYTHONPATH": path, "PYTHON": sys.executable,
            "OMP_NUM_THREADS": "1"}


def _sbatch(conf: str, folder: Path, config: Path, *options: str) -> str:
    """Submit tools/slurm_train.sh (its own #SBATCH lines: 2 tasks on one node) from the
    checkout, as a user does; returns the job id."""
    args = ["sbatch", "--parsable", f"--output={folder / 'job.out'}", f"--chdir={ROOT}",
            f"--job-name=libai-{folder.name}", str(SCRIPT), str(config),
            "--work-dir", str(folder / "work"), "--cfg-options", f"train_cfg.max_iters={STEPS}",
            f"default_hooks.checkpoint.interval={EVERY}", "default_hooks.logger.interval=10",
            "+default_hooks.logger.plot=False", *options]
    done = subprocess.run(args, capture_output=True, text=True, env=_env(conf), timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def _job(conf: str, job: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True,
                         env=_env(conf), timeout=30).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


def _wait(conf: str, job: str, timeout: float = 600) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fields = _job(conf, job)
        if fields.get("JobState") in ENDED:
            return fields
        time.sleep(0.5)
    raise AssertionError(f"job {job} did not end in {timeout} s: {_job(conf, job)}")


def _log(folder: Path) -> str:
    return (folder / "job.out").read_text(errors="replace")


def _state(folder: Path) -> dict[str, torch.Tensor]:
    """The final checkpoint's weights and optimizer tensors, by name."""
    ckpt = torch.load(folder / "work" / f"iter_{STEPS}.pth", map_location="cpu", weights_only=False)
    tensors = {f"model.{k}": v for k, v in ckpt["state_dict"].items()}
    for index, state in ckpt["optimizer"]["optimizer"]["state"].items():  # the wrapper's AdamW
        tensors.update({f"optimizer.{index}.{k}": v for k, v in state.items()
                        if isinstance(v, torch.Tensor)})
    return tensors


def _stop_when_held(conf: str, jobs: dict[str, tuple[Path, list[str]]]) -> None:
    """Send each job its stop once the hook holds it at STOP_AT (in the order they get there)."""
    # 3 jobs of 2 tasks queue on 2 CPUs: about 45 s on an idle 2-core machine, 5 min loaded
    waiting, deadline = dict(jobs), time.monotonic() + 600
    while waiting and time.monotonic() < deadline:
        for job, (folder, command) in list(waiting.items()):
            if (folder / "held").exists():
                subprocess.run(command + [job], check=True, env=_env(conf), timeout=60)
                del waiting[job]
            elif _job(conf, job).get("JobState") in ENDED:
                raise AssertionError(f"job {job} ended before its stop:\n{_log(folder)[-3000:]}")
        time.sleep(0.2)
    assert not waiting, f"not held at iteration {STOP_AT} in 600 s: {sorted(waiting)}"


def test_sbatch_jobs_train_and_a_requeued_job_ends_with_the_straight_jobs_weights(slurm, tmp_path):
    straight = _sbatch(slurm, tmp_path / "straight", _config(tmp_path / "straight", hold=False))
    by_signal = _sbatch(slurm, tmp_path / "usr1", _config(tmp_path / "usr1", hold=True))
    by_requeue = _sbatch(slurm, tmp_path / "requeue", _config(tmp_path / "requeue", hold=True))
    _stop_when_held(slurm, {by_signal: (tmp_path / "usr1", ["scancel", "--signal=USR1"]),
                            by_requeue: (tmp_path / "requeue", ["scontrol", "requeue"])})

    fields = _wait(slurm, straight)
    log = _log(tmp_path / "straight")
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "0"), log[-3000:]
    assert re.search(r"world size\s+2\n", log) and f"slurm        job {straight}, task 0 of 2 (srun)" in log
    accuracy = float(re.findall(rf"Iter\(val\) \[{STEPS}/{STEPS}\]\s+val/accuracy: ([0-9.]+)", log)[-1])
    print(f"2-task sbatch job {straight}: val/accuracy {accuracy:.4f} after {STEPS} steps")
    assert accuracy > 0.5  # 10 classes: chance is 0.1
    reference = _state(tmp_path / "straight")

    for job, name, signame, says in (
            (by_signal, "usr1", "SIGUSR1", f"requeued Slurm job {by_signal}: it resumes from this "
                                           f"checkpoint (restart 1) (exit status 138)."),
            (by_requeue, "requeue", "SIGTERM", "Continue with: srun python tools/train.py")):
        fields = _wait(slurm, job)
        log = _log(tmp_path / name)
        assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "1"), log[-3000:]
        stop = f"Stopped by {signame} at iteration {STOP_AT} of {STEPS}: checkpoint "
        assert log.count(stop) == 2 and says in log, log  # each rank's line
        assert (f"job {job}, task 0 of 2 (srun), requeued run (restart 1): resuming from the "
                f"latest checkpoint") in log
        assert f"Resumed from {tmp_path / name / 'work' / f'iter_{STOP_AT}.pth'} at iteration {STOP_AT}" in log
        # Slurm's SIGTERM after the requeue finds the stop settled: no "second signal" exit
        assert "Traceback" not in log and "second signal" not in log
        resumed = _state(tmp_path / name)
        assert resumed.keys() == reference.keys()
        unequal = [k for k in reference if not torch.equal(reference[k], resumed[k])]
        assert not unequal, f"{name}: not bit-identical to the straight job: {unequal}"


def test_a_bad_config_fails_the_job_with_one_line_and_is_not_requeued(slurm, tmp_path):
    job = _sbatch(slurm, tmp_path / "bad", _config(tmp_path / "bad", hold=False),
                  "train_cfg.max_iter=5")
    fields = _wait(slurm, job)
    time.sleep(2)  # a requeue would show now
    fields = _job(slurm, job)
    log = _log(tmp_path / "bad")
    # srun --kill-on-bad-exit: the first task to fail ends the step, so the status is 2 or the
    # other task's SIGTERM (143), whichever came first; never 0, never requeued
    assert (fields["JobState"], fields["Restarts"], fields["Requeue"]) == ("FAILED", "0", "1"), log
    assert fields["ExitCode"] in ("2:0", "143:0"), fields["ExitCode"]
    # one line, the same from each task that got to print it before the step ended
    errors = [line for line in log.splitlines() if line.startswith("error: ")]
    assert len(set(errors)) == 1 and "Did you mean 'max_iters'" in errors[0], log
    assert "Traceback" not in log and "Stopped by" not in log
