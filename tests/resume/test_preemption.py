"""SIGTERM / SIGUSR1 at chosen moments (mid-step, mid-validation, mid-save, before the first step),
then `--resume`: the run ends bit-identical to one never signalled, every step and every validation
logged once, and the stopped process says so with status 128 + the signal's number.

The signal comes from a hook calling os.kill on its own process at the chosen point, so the moment
is exact; the handler only sets a flag and the loops act on it where they can stop cleanly.
"""

import copy
import os
import runpy
import signal
import sys
import time
from typing import Any

import pytest
import resume_helpers as rh

from libai.checkpoint import load_checkpoint, read_latest, verify_checkpoint
from libai.hooks import Hook
from libai.registry import HOOKS
from libai.runner import Runner
from libai.utils.errors import ConfigError
from libai.utils.signals import Preempted

N = 12  # iterations; checkpoints every 4, validation every 5 (and after the last)


@HOOKS.register_module()
class SignalAtHook(Hook):
    """Send ``signame`` to this process ``times`` times at one moment of iteration ``at``:
    'step' between backward and the optimizer step, 'val' after the second batch of the
    validation at ``at``, 'save' when the checkpoint of ``at`` is being written, 'start' before
    the first step. ``gap`` seconds pass before each: a signal within SAME_REQUEST_S of the
    first is the same request relayed again, a later one is a second request."""

    priority = "LOWEST"

    def __init__(self, moment: str, at: int = 0, signame: str = "SIGTERM", times: int = 1,
                 gap: float = 0.0):
        self.moment, self.at, self.times, self.gap = moment, at, times, gap
        self.signum = getattr(signal, signame)

    def _send(self) -> None:
        for _ in range(self.times):
            time.sleep(self.gap)
            os.kill(os.getpid(), self.signum)

    def before_train(self, runner: Any) -> None:
        if self.moment == "start":
            self._send()

    def after_backward(self, runner: Any) -> None:
        if self.moment == "step" and runner.iter + 1 == self.at:
            self._send()

    def after_val_iter(self, runner: Any, batch_idx: int, data_batch: Any = None,
                       outputs: Any = None) -> None:
        if self.moment == "val" and runner.iter == self.at and batch_idx == 1:
            self._send()

    def before_save_checkpoint(self, runner: Any, checkpoint: Any = None) -> None:
        if self.moment == "save" and checkpoint["meta"]["iter"] == self.at:
            self._send()


def config(work_dir, loop="IterBasedTrainLoop", **extra):
    cfg = rh.contract_config(work_dir, loop=loop, max_iters=N, max_epochs=2)
    cfg["train_cfg"]["val_interval"] = 5 if loop == "IterBasedTrainLoop" else 1
    # noise drawn from the global RNG at every load: a validation shifts the training randomness
    cfg["val_dataloader"] = dict(cfg["train_dataloader"], batch_size=8,
                                 sampler=dict(type="DefaultSampler", shuffle=False))
    cfg["val_evaluator"] = dict(type="Accuracy")
    cfg["val_cfg"] = dict(type="ValLoop")
    cfg.update(extra)
    return cfg


def rows(work_dir):
    """Every logged row (training and validation), without wall-clock values."""
    return [{k: v for k, v in r.items() if k not in rh.NOT_COMPARED} for r in rh.read_scalars(work_dir)]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """``straight(loop)``: the uninterrupted run of that loop type, trained once per module (on
    first use): (work dir, final state dict)."""
    done = {}

    def get(loop):
        if loop not in done:
            work = tmp_path_factory.mktemp(loop)
            state = rh.train(config(work, loop)).unwrapped_model.state_dict()
            done[loop] = work, copy.deepcopy(state)
        return done[loop]

    return get


def preempted(cfg, **hook):
    runner = Runner.from_cfg(dict(copy.deepcopy(cfg), custom_hooks=[dict(type="SignalAtHook", **hook)]))
    with pytest.raises(Preempted) as info:
        runner.train()
    return info.value


CASES = {  # moment, at, loop -> the iteration the checkpoint holds, validation redone on resume
    "mid-step": (("step", 6, "IterBasedTrainLoop"), 6, False),
    "mid-validation": (("val", 10, "IterBasedTrainLoop"), 10, True),
    "mid-save": (("save", 8, "IterBasedTrainLoop"), 8, False),
    "before-first-step": (("start", 0, "IterBasedTrainLoop"), None, False),
    "epoch-loop-last-step": (("step", 11, "EpochBasedTrainLoop"), 11, True),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_signal_then_resume_is_bit_identical(tmp_path, straight, libai_log, case):
    (moment, at, loop), stop_iter, val_redone = CASES[case]
    ref_dir, ref_state = straight(loop)
    cfg = config(tmp_path / "w", loop)
    stop = preempted(cfg, moment=moment, at=at, signame="SIGUSR1")
    assert stop.exit_status == 128 + signal.SIGUSR1 == 138
    stopped = [m for m in libai_log if m.startswith("Stopped by SIGUSR1")]
    assert len(stopped) == 1 and str(stop) == stopped[0]
    if stop_iter is None:  # nothing trained: nothing saved, a resume starts fresh
        assert "nothing trained since this run started" in stopped[0] and read_latest(tmp_path / "w") is None
    else:
        assert f"at iteration {stop_iter} of " in stopped[0]
        ckpt = load_checkpoint(read_latest(tmp_path / "w"))  # verifies the manifest
        assert ckpt["loop"]["iter"] == stop_iter and str(read_latest(tmp_path / "w")) in stopped[0]
        assert ckpt["loop"].get("val_pending", False) is val_redone
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # handlers put back

    resumed = rh.train_resumed(cfg)
    rh.assert_same_tensors(ref_state, resumed.unwrapped_model.state_dict(), "state_dict")
    assert rows(tmp_path / "w") == rows(ref_dir)  # each step and each validation once, same values


def test_train_tool_exits_143_without_traceback_and_resumes(tmp_path, capsys, libai_log):
    """Through tools/train.py (run_cli), SIGTERM mid-step: status 143, one line, no traceback."""
    cfg_file = tmp_path / "cfg.py"
    cfg_file.write_text("".join(f"{k} = {v!r}\n" for k, v in config(tmp_path / "w").items()))

    def train_tool(*args):
        argv = sys.argv
        sys.argv = ["train.py", str(cfg_file), *args]
        try:
            with pytest.raises(SystemExit) as info:
                runpy.run_path(rh.TRAIN_TOOL, run_name="__main__")
        finally:
            sys.argv = argv
        return info.value.code

    hook = "+custom_hooks=[{'type':'SignalAtHook','moment':'step','at':3}]"
    assert train_tool("--cfg-options", hook) == 143
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error:" not in err
    stopped = [m for m in libai_log if m.startswith("Stopped by SIGTERM at iteration 3 of")]
    assert len(stopped) == 1 and f"Continue with: python {rh.TRAIN_TOOL} {cfg_file} " in stopped[0]
    assert stopped[0].endswith("--resume (exit status 143).")
    assert load_checkpoint(read_latest(tmp_path / "w"))["loop"]["iter"] == 3
    assert train_tool("--resume") == 0
    assert load_checkpoint(tmp_path / "w" / f"iter_{N}.pth")["loop"]["iter"] == N


def test_preemption_key_is_validated_and_can_be_turned_off(tmp_path):
    with pytest.raises(ConfigError, match=r"preemption.signals: 'SIGTREM'.*Did you mean 'SIGTERM'"):
        Runner.from_cfg(config(tmp_path, preemption=dict(signals=["SIGTREM"])))
    with pytest.raises(ConfigError, match=r"Unknown key 'preemption.signal'.*'signals'"):
        Runner.from_cfg(config(tmp_path, preemption=dict(signal=["SIGTERM"])))
    seen = []

    @HOOKS.register_module(force=True)
    class _SeeStop(Hook):
        def before_train(self, runner):
            seen.append((runner.stop_request, signal.getsignal(signal.SIGTERM)))

    for value in (None, dict(signals=["SIGUSR2"])):
        cfg = config(tmp_path / str(len(seen)), preemption=value, custom_hooks=[dict(type="_SeeStop")])
        cfg["train_cfg"]["max_iters"], cfg["param_scheduler"] = 1, []
        rh.train(cfg)
    (off, term_off), (on, term_on) = seen
    assert off is None and term_off is signal.getsignal(signal.SIGTERM)
    assert on.signals == (signal.SIGUSR2,) and term_on is signal.getsignal(signal.SIGTERM)


SECOND_SIGNAL = """
import runpy, sys
sys.path.insert(0, {tests!r})
import test_preemption  # registers SignalAtHook
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path({tool!r}, run_name="__main__")
"""


def test_second_signal_exits_at_once_and_keeps_the_last_checkpoint(tmp_path, run_process):
    """A second SIGTERM (over SAME_REQUEST_S after the first) while the stop checkpoint is being
    written: the process ends at once with 143, writes no checkpoint of that iteration, and the
    one before stays complete and named."""
    cfg_file, driver = tmp_path / "cfg.py", tmp_path / "driver.py"
    cfg = config(tmp_path / "w")
    cfg.pop("val_dataloader"), cfg.pop("val_evaluator"), cfg.pop("val_cfg")
    cfg_file.write_text("".join(f"{k} = {v!r}\n" for k, v in cfg.items()))
    driver.write_text(SECOND_SIGNAL.format(tests=os.path.dirname(__file__), tool=rh.TRAIN_TOOL))
    # first SIGTERM mid-step 6, second while the stop checkpoint of 6 is being written
    out = run_process(
        driver, cfg_file, "--cfg-options",
        "+custom_hooks=[{'type':'SignalAtHook','moment':'step','at':6},"
        "{'type':'SignalAtHook','moment':'save','at':6,'gap':1.2}]", timeout=120)
    assert out.returncode == 143, out.stderr[-3000:]
    assert "second signal (SIGTERM): exiting at once with status 143" in out.stderr
    assert "Traceback" not in out.stderr and "Stopped by" not in out.stderr
    work = tmp_path / "w"
    assert read_latest(work) == work / "iter_4.pth"
    verify_checkpoint(work / "iter_4.pth")
    assert not (work / "iter_6.pth").exists()


@pytest.mark.parametrize("argv, expected", [
    (["tools/train.py", "c.py"], "python tools/train.py c.py --resume"),
    (["/venv/bin/libai", "train", "bert_tiny"], "libai train bert_tiny --resume"),
    (["/x/libai/__main__.py", "train", "c.py", "--resume"], "python -m libai train c.py --resume"),
    (["/venv/bin/libai", "test", "c.py"], "the same code with resume=True (work dir /w)"),
])
def test_the_stop_line_names_the_command_that_continues(monkeypatch, argv, expected):
    from types import SimpleNamespace

    from libai.runner.preemption import _resume_command

    monkeypatch.setattr(sys, "argv", argv)
    assert _resume_command(SimpleNamespace(work_dir="/w")) == expected
