"""ProfilerHook: a torch.profiler window over training iterations, its files, no side effects."""

import glob
import json
import os

import pytest
import torch

from libai.hooks import Hook, ProfilerHook
from libai.registry import HOOKS
from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.errors import ConfigError

QUIET = dict(logger=dict(interval=5, progress_bar=False, plot=False), checkpoint=None)


class ProfilerProbe(Hook):
    """Notes, per iteration, whether a profiler is collecting events."""

    priority = "NORMAL"

    def __init__(self):
        self.enabled = []

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.enabled.append(torch.autograd.profiler._is_profiler_enabled)


def train(tmp_path, max_iters, *hooks):
    cfg = toy_config(work_dir=str(tmp_path), default_hooks=QUIET,
                     train_cfg=dict(max_iters=max_iters, val_interval=100))
    runner = Runner.from_cfg(cfg)
    for hook in hooks:
        runner.register_hook(hook)
    runner.train()
    return runner


def run_log(runner):
    with open(os.path.join(runner.log_dir, f"{runner.timestamp}.log")) as f:
        return f.read()


def test_registered():
    assert HOOKS.get("ProfilerHook") is ProfilerHook


def test_window_writes_traces_and_table_and_changes_no_math(tmp_path):
    probe = ProfilerProbe()
    cfg = toy_config(work_dir=str(tmp_path / "prof"), default_hooks=QUIET,
                     train_cfg=dict(max_iters=8, val_interval=100),
                     custom_hooks=[dict(type="ProfilerHook", wait=1, warmup=1, active=2)])
    runner = Runner.from_cfg(cfg)
    runner.register_hook(probe)
    runner.train()
    plain = train(tmp_path / "plain", 8)

    # profiling changes no math
    profiled = runner.unwrapped_model.state_dict()
    for name, value in plain.unwrapped_model.state_dict().items():
        assert torch.equal(profiled[name], value), name

    # iterations 1 (wait) and 2 (warmup) untouched, 3-4 recorded, then the profiler is gone
    assert probe.enabled == [False, False, True, True, False, False, False, False]
    assert not torch.autograd.profiler._is_profiler_enabled
    for stage in ("before_train_iter", "after_train_iter"):  # off the per-iteration stages
        assert not any(isinstance(m.__self__, ProfilerHook) for m in runner.stage_methods[stage])

    out = os.path.join(runner.log_dir, "profiler")
    (trace,) = glob.glob(os.path.join(out, "trace_*.json"))
    assert os.path.basename(trace) == "trace_rank0_iter3-4.json"
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    assert any(str(e.get("name", "")).startswith("ProfilerStep#") for e in events)
    assert glob.glob(os.path.join(out, "tb", "rank0.*.pt.trace.json"))

    log = run_log(runner)
    assert "ProfilerHook: iterations 3-4 (rank 0), top 10 operators by self_cpu_time_total" in log
    assert "Self CPU %" in log and "Self CPU time total" in log
    assert "trace_rank0_iter3-4.json" in log and "ui.perfetto.dev" in log


def test_training_shorter_than_the_window_stops_the_profiler(tmp_path):
    hook = ProfilerHook(wait=1, warmup=1, active=3, on_trace_ready="chrome")
    runner = train(tmp_path / "short", 3, hook)  # training ends inside the active phase
    assert not torch.autograd.profiler._is_profiler_enabled
    assert [os.path.basename(p) for p in hook.trace_files] == ["trace_rank0_iter3-3.json"]
    assert not os.path.exists(os.path.join(runner.log_dir, "profiler", "tb"))
    assert "ProfilerHook: iteration 3 (rank 0)" in run_log(runner)

    hook = ProfilerHook(wait=1, warmup=1, active=1)
    runner = train(tmp_path / "tiny", 1, hook)  # ends while waiting: nothing recorded
    assert not torch.autograd.profiler._is_profiler_enabled
    assert not os.path.exists(os.path.join(runner.log_dir, "profiler"))
    assert "before the profiler recorded any iteration" in run_log(runner)


def test_a_window_after_the_end_of_training_is_reported(make_runner, run_iters):
    runner = make_runner(ProfilerHook(begin=20), max_iters=5)
    run_iters(runner)
    assert any("before the profiler's window (from iteration 21)" in m for m in runner.messages)
    assert not os.path.exists(os.path.join(runner.log_dir, "profiler"))


def test_begin_and_repeat(make_runner, run_iters):
    hook = ProfilerHook(wait=0, warmup=1, active=1, repeat=2, begin=3, on_trace_ready=())
    runner = make_runner(hook, max_iters=10)
    run_iters(runner)
    assert "ProfilerHook: iteration 5 (rank 0)" in "\n".join(runner.messages)
    assert "ProfilerHook: iteration 7 (rank 0)" in "\n".join(runner.messages)
    assert not os.path.exists(os.path.join(runner.log_dir, "profiler"))
    assert not torch.autograd.profiler._is_profiler_enabled


def test_other_ranks_do_nothing_by_default(make_runner, run_iters):
    runner = make_runner(ProfilerHook(wait=0, warmup=1, active=1), max_iters=3, rank=1)
    run_iters(runner)
    assert not os.path.exists(os.path.join(runner.log_dir, "profiler"))
    runner = make_runner(ProfilerHook(wait=0, warmup=1, active=1, all_ranks=True), rank=1,
                         max_iters=3)
    run_iters(runner)
    files = sorted(os.listdir(os.path.join(runner.log_dir, "profiler")))
    assert files == ["tb", "trace_rank1_iter2-2.json"]


@pytest.mark.parametrize("kwargs, match", [
    (dict(active=0), "active must be an int >= 1"),
    (dict(repeat=0), "repeat must be an int >= 1"),
    (dict(on_trace_ready="chrom"), "Did you mean 'chrome'"),
    (dict(activities=["gpu"]), "unknown activity 'gpu'"),
    (dict(sort_by="self_cpu_time"), "Did you mean 'self_cpu_time_total'"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ProfilerHook(**kwargs)


class _BrokenProfile:
    """torch.profiler.profile whose start, or each step, fails (CUPTI busy, say)."""

    fail_step = False

    def __init__(self, **kwargs):
        self.current_action = torch.profiler.ProfilerAction.RECORD

    def __enter__(self):
        if not self.fail_step:
            raise RuntimeError("profiler already enabled")
        return self

    def __exit__(self, *exc):
        return False

    def step(self):
        raise RuntimeError("no events")


@pytest.mark.parametrize("fail_step", [False, True])
def test_a_failing_profiler_is_one_warning_and_the_run_trains_on(tmp_path, monkeypatch,
                                                                 fail_step):
    # device="cpu": the claim is about the hook's error handling
    monkeypatch.setattr(_BrokenProfile, "fail_step", fail_step)
    monkeypatch.setattr(torch.profiler, "profile", _BrokenProfile)
    runner = train(tmp_path, 6, ProfilerHook(wait=0, warmup=1, active=1, begin=1))
    assert runner.iter == 6
    said = [line for line in run_log(runner).splitlines() if "Profile lost" in line]
    assert len(said) == 1 and "WARNING" in said[0], said
    assert ("the profiler failed (RuntimeError: no events)" if fail_step
            else "did not start (RuntimeError: profiler already enabled)") in said[0]
