"""kill -9 at unlucky moments, then `tools/train.py --resume`, until a run finishes.

Kills land in the middle of checkpoint writes, right after a manifest appears (before the latest
pointer moves), between saves, and at random times. Afterwards no damaged checkpoint may look
complete, the latest pointer must name a complete one, and the final weights and the logged
series must equal those of a run that was never killed.

Each attempt is a real process killed with a real SIGKILL: a fork (torch already imported, so it
trains at once instead of spending seconds importing) of a supervisor, itself one rank forked
from the test (spawn_ranks), which starts the attempts, watches the work dir and kills.
"""

import os
import random
import re
import signal
import time

import resume_helpers as rh
import tool_runs
from tool_runs import run_tool

from libai.checkpoint import load_checkpoint, read_latest, verify_checkpoint
from libai.checkpoint.manifest import manifest_path

N = 60
MAX_ATTEMPTS = 8

CONFIG = """
model = dict(type="ToyModel", in_features=64, num_classes=4, hidden=1024)
train_dataloader = dict(
    dataset=dict(type="ToyDataset", num_samples=256, in_features=64, num_classes=4, seed=0),
    sampler=dict(type="DefaultSampler", shuffle=True),
    batch_size=16,
)
train_cfg = dict(type="IterBasedTrainLoop", max_iters={n})
optim_wrapper = dict(optimizer=dict(type="AdamW", lr=1e-4, weight_decay=0.01))
param_scheduler = [
    dict(type="LinearLR", start_factor=0.1, begin=0, end=10),
    dict(type="CosineAnnealingLR", begin=10, eta_min=1e-6),
]
default_hooks = dict(
    logger=dict(interval=1, progress_bar=False, plot=False, backends=[dict(type="JsonlBackend")]),
    checkpoint=dict(interval=2),
)
randomness = dict(seed=0, deterministic=True)
"""

_TEMP = re.compile(r"^\.iter_\d+\.pth\.tmp-\d+$")


def start(config, work, resume, log):
    """A process training ``config`` in ``work`` (``--resume``): tools/train.py in a fork of
    this one; what it printed goes to ``log`` when it ends. Returns its pid."""
    pid = os.fork()
    if pid == 0:  # the attempt: never returns
        status = 1
        try:
            run = run_tool(rh.TRAIN_TOOL, config, "--work-dir", work, *(["--resume"] * resume))
            log.write_text(run.output)
            status = run.returncode
        finally:
            os._exit(status)
    return pid


def wait(pid, timeout, plan=None):
    """The exit code of ``pid`` (-9: killed), killing it with SIGKILL once ``plan`` is due."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if (plan is not None and plan.due()) or time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        time.sleep(0.001)


def listing(work):
    try:
        return set(os.listdir(work))
    except FileNotFoundError:
        return set()


def pointer(work):
    try:
        return (work / "latest_checkpoint").read_text()
    except FileNotFoundError:
        return None


class KillPlan:
    """When to kill one attempt, drawn from ``rng``: mid-write of a checkpoint, right after a
    manifest appears (before the pointer moves), within a third of an iteration after the
    pointer moved, or after a random share of ``duration`` (what a whole run of N iterations
    takes). ``skip`` saves of the attempt are let through first."""

    MODES = ("mid_write", "after_manifest", "after_pointer", "timed")

    def __init__(self, rng, work, duration):
        self.work = work
        self.mode = rng.choice(self.MODES)
        self.skip = rng.randint(0, 4)
        self.delay = (rng.uniform(0.0, 0.3) * duration / N if self.mode == "after_pointer"
                      else rng.uniform(0.1, 0.8) * duration)
        self.started = time.monotonic()
        names = listing(work)
        self.manifests = self._manifests(names)
        self.old_temps = {f for f in names if _TEMP.match(f)}  # left by earlier kills
        self.pointer, self.moves, self.kill_at = pointer(work), 0, None

    @staticmethod
    def _manifests(names):
        return {f for f in names if f.endswith(".manifest.json")}

    def due(self):
        now, names, pointed = time.monotonic(), listing(self.work), pointer(self.work)
        if pointed != self.pointer:
            self.pointer, self.moves = pointed, self.moves + 1
            if self.moves == self.skip + 1:  # the first move we do not let through
                self.kill_at = now + self.delay
        if self.mode == "timed":
            return now - self.started >= self.delay
        if self.mode == "mid_write":
            temps = {f for f in names if _TEMP.match(f)} - self.old_temps
            return self.moves >= self.skip and bool(temps)
        if self.mode == "after_manifest":
            return len(self._manifests(names) - self.manifests) > self.skip
        return self.kill_at is not None and now >= self.kill_at


def attempts(config, ref, work, logs):
    """The supervisor (a forked rank): the reference run, then attempts in ``work`` killed as
    their KillPlans say, each resuming the last, until one finishes or MAX_ATTEMPTS have run.
    Whenever a process died, the latest pointer names a whole checkpoint. Returns the history:
    (the attempt's kill mode, or 'final', and its exit code)."""
    began = time.monotonic()
    code = wait(start(config, ref, False, logs / "reference.log"), 120)
    assert code == 0, (logs / "reference.log").read_text()
    duration = time.monotonic() - began
    rng = random.Random(20240611)
    history = []
    for attempt in range(MAX_ATTEMPTS):
        last = attempt == MAX_ATTEMPTS - 1
        log = logs / f"attempt_{attempt}.log"
        plan = KillPlan(rng, work, duration)  # before the start: the files it finds are old
        code = wait(start(config, work, attempt > 0, log), 120, None if last else plan)
        history.append(("final" if last else plan.mode, code))
        if code == 0:
            break
        assert code == -signal.SIGKILL, log.read_text() if log.exists() else history
        if pointer(work) is not None:  # whenever the process died, the pointer names a whole file
            verify_checkpoint(read_latest(work))
    return history


def test_kill_9_at_random_moments_then_resume_matches_an_uninterrupted_run(tmp_path, spawn_ranks):
    config = tmp_path / "kill_cfg.py"
    config.write_text(CONFIG.format(n=N))
    ref, work = tmp_path / "reference", tmp_path / "killed"
    tool_runs.import_before_forking()
    supervisor = spawn_ranks(1, attempts, config, ref, work, tmp_path, timeout=400).check()
    history = supervisor.ranks[0].value
    assert history[-1][1] == 0, history
    kills = [h for h in history if h[1] == -signal.SIGKILL]
    assert len(kills) >= 2, f"the test killed too rarely to prove anything: {history}"

    # no file that a crash left unfinished looks complete
    for name in sorted(listing(work)):
        if name.endswith(".pth") and manifest_path(work / name).exists():
            load_checkpoint(work / name)  # verifies size and sha256 against the manifest
        if name.endswith(".manifest.json"):
            assert (work / name[: -len(".manifest.json")]).exists(), name
    latest = read_latest(work)
    assert latest == work / f"iter_{N}.pth"
    verify_checkpoint(latest)

    a, b = load_checkpoint(ref / f"iter_{N}.pth"), load_checkpoint(latest)
    rh.assert_same_tensors(a["state_dict"], b["state_dict"], "state_dict")
    rh.assert_same_tensors(a["optimizer"], b["optimizer"], "optimizer")
    rh.assert_same_logs(ref, work, N)
