"""Two processes (DDP, gloo on CPU): when tools/train.py ends, cleanly or after Ctrl-C, the process
group is gone and its worker threads are joined. A group left alive keeps threads into the
interpreter's exit, where one releasing a finished collective aborts the process ("terminate
called without an active exception", about 1 run in 20 before this was fixed)."""

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''
import os
import weakref

import torch.distributed as dist

from libai.hooks import Hook

GROUP = []


def threads():
    return len(os.listdir("/proc/self/task"))


class GroupProbe(Hook):
    """Keeps a weak reference to the default process group; raises Ctrl-C after `stop_at`."""

    def __init__(self, stop_at=None):
        self.stop_at = stop_at

    def before_run(self, runner):
        GROUP.append(weakref.ref(dist.group.WORLD))

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if runner.iter + 1 == self.stop_at:
            raise KeyboardInterrupt
'''

# Runs tools/train.py as `python tools/train.py ...` would, then reports on the group. One
# scenario per torchrun launch: a second run in the same workers would init the group again on the
# agent's store, whose keys the first one left (gloo then meets a stale peer: reset or hang).
DRIVER = '''
import json, os, runpy, sys
import teardown_probe as probe

before = probe.threads()
sys.argv = ["train.py", *sys.argv[1:]]
try:
    runpy.run_path({tool!r}, run_name="__main__")
except SystemExit as e:
    status = e.code
report = dict(status=status, group_alive=probe.GROUP[0]() is not None,
              threads_before=before, threads_after=probe.threads())
with open(os.path.join({out!r}, "report_" + os.environ["RANK"] + ".json"), "w") as f:
    json.dump(report, f)
'''

CONFIG = """
model = dict(type="DigitsMLP", in_features=8, hidden=16, num_classes=2)
train_dataloader = dict(dataset=dict(type="ToyDataset", num_samples=32, seed=0),
                        sampler=dict(type="DefaultSampler", shuffle=True), batch_size=4)
train_cfg = dict(type="IterBasedTrainLoop", max_iters=4)
optim_wrapper = dict(optimizer=dict(type="SGD", lr=0.05))
default_hooks = dict(logger=dict(interval=1, progress_bar=False, plot=False), checkpoint=None)
env_cfg = dict(dist_timeout=120)
custom_hooks = [dict(type="teardown_probe.GroupProbe", stop_at={stop_at})]
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
@pytest.mark.parametrize("stop_at, status", [(None, 0), (2, 130)], ids=["clean", "ctrl-c"])
def test_train_tool_joins_the_group_threads_before_exit(torchrun, tmp_path, stop_at, status):
    (tmp_path / "teardown_probe.py").write_text(PROBE)
    (tmp_path / "driver.py").write_text(DRIVER.format(tool=str(ROOT / "tools" / "train.py"),
                                                      out=str(tmp_path)))
    (tmp_path / "cfg.py").write_text(CONFIG.format(stop_at=stop_at))
    pythonpath = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    out = torchrun(2, tmp_path / "driver.py", tmp_path / "cfg.py", "--work-dir", tmp_path / "w",
                   env=dict(PYTHONPATH=pythonpath), timeout=240)
    log = out.output
    assert out.returncode == 0, log[-3000:]  # the driver reports the tool's status itself
    reports = [json.loads((tmp_path / f"report_{rank}.json").read_text()) for rank in (0, 1)]
    for r in reports:
        assert r["status"] == status, log[-3000:]
        assert not r["group_alive"], r
        assert r["threads_after"] <= r["threads_before"], r
