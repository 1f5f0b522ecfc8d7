"""kill -9 at unlucky moments, then `tools/train.py --resume`, until a run finishes.

Kills land in the middle of checkpoint writes, right after a manifest appears (before the latest
pointer moves), between saves, and at random times. Afterwards no damaged checkpoint may look
complete, the latest pointer must name a complete one, and the final weights and the logged
series must equal those of a run that was never killed.
"""

import os
import random
import re
import signal
import subprocess
import time

import pytest
import resume_helpers as rh

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
    args = [rh.PYTHON, rh.TRAIN_TOOL, str(config), "--work-dir", str(work)]
    if resume:
        args.append("--resume")
    return subprocess.Popen(
        args, cwd=rh.ROOT, env=rh.python_env(), stdout=log, stderr=subprocess.STDOUT
    )


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
    manifest appears (before the pointer moves), shortly after the pointer moved, or after a
    random time. ``skip`` saves of the attempt are let through first."""

    MODES = ("mid_write", "after_manifest", "after_pointer", "timed")

    def __init__(self, rng, work):
        self.work = work
        self.mode = rng.choice(self.MODES)
        self.skip = rng.randint(0, 4)
        self.delay = (
            rng.uniform(0.0, 0.03) if self.mode == "after_pointer" else rng.uniform(1.5, 4.0)
        )
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


@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume_matches_an_uninterrupted_run(tmp_path):
    config = tmp_path / "kill_cfg.py"
    config.write_text(CONFIG.format(n=N))
    ref, work = tmp_path / "reference", tmp_path / "killed"
    with open(tmp_path / "reference.log", "w") as log:
        code = start(config, ref, False, log).wait(timeout=120)
    assert code == 0, (tmp_path / "reference.log").read_text()

    rng = random.Random(20240611)
    history = []
    for attempt in range(MAX_ATTEMPTS):
        with open(tmp_path / f"attempt_{attempt}.log", "w") as log:
            proc = start(config, work, attempt > 0, log)
            last = attempt == MAX_ATTEMPTS - 1
            plan = KillPlan(rng, work)
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                if not last and plan.due():
                    proc.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.001)
            code = proc.wait(timeout=120)
        history.append(("final" if last else plan.mode, code))
        if code == 0:
            break
        assert code == -signal.SIGKILL, (tmp_path / f"attempt_{attempt}.log").read_text()
        if pointer(work) is not None:  # whenever the process died, the pointer names a whole file
            verify_checkpoint(read_latest(work))
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
