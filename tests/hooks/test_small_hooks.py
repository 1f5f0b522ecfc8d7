"""RuntimeInfoHook, IterTimerHook, DistSamplerSeedHook, EmptyCacheHook, ParamSchedulerHook,
DEFAULT_HOOKS and the stage-name check."""

import time

import pytest
import torch

import libai.hooks as hooks_pkg
from libai.hooks import (
    DEFAULT_HOOKS,
    DistSamplerSeedHook,
    EmptyCacheHook,
    Hook,
    IterTimerHook,
    ParamSchedulerHook,
    RuntimeInfoHook,
)
from libai.hooks import param_scheduler_hook as psh
from libai.registry import HOOKS, LOG_BACKENDS
from libai.utils.errors import ConfigError


def test_runtime_info(make_runner, run_iters, run_val):
    runner = make_runner(RuntimeInfoHook(), max_iters=6, max_epochs=2, iters_per_epoch=3)
    runner.call_hook("before_run")
    run_iters(runner, validate=lambda done: {"val/accuracy": done / 6, "val/note": "n/a"})
    hub = runner.message_hub
    assert hub.get_info("max_iters") == 6 and hub.get_info("max_epochs") == 2
    assert hub.get_info("epoch") == 2
    assert hub.get_info("iter") is None  # the live position is runner.iter, not a copy
    assert hub.latest("val/accuracy") == 1.0 and hub.last_step("val/accuracy") == 6
    assert not hub.has("val/note")
    run_val(runner, {"test/f1": 0.5}, stage="test")
    assert hub.latest("test/f1") == 0.5


def test_runtime_info_before_run_needs_no_train_loop(make_runner):
    runner = make_runner(RuntimeInfoHook())
    del runner.train_loop  # a test-only runner: asking for max_iters would fail
    runner.call_hook("before_run")
    assert runner.message_hub.get_info("epoch") == 0


def test_iter_timer(make_runner, run_iters, run_val):
    class Slow(Hook):
        priority = "LOWEST"

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            time.sleep(0.01)  # counted in the next iteration's data time

    runner = make_runner(IterTimerHook(), Slow(), max_iters=3)
    run_iters(runner)
    hub = runner.message_hub
    assert hub.mean("train/data_time") >= 0.005
    assert hub.latest("train/time") >= hub.latest("train/data_time")
    run_val(runner, {}, n_batches=3)
    assert hub.has("val/time") and hub.has("val/data_time")


def test_sampler_seed(make_runner, run_iters):
    runner = make_runner(DistSamplerSeedHook(), max_iters=6, max_epochs=3, iters_per_epoch=2)
    inner = type("S", (), {"epochs": [], "set_epoch": lambda self, e: self.epochs.append(e)})()
    runner.train_dataloader.batch_sampler = type("B", (), {"sampler": inner})()
    run_iters(runner)
    assert runner.sampler.epochs == [0, 1, 2] and inner.epochs == [0, 1, 2]
    # the same sampler reachable both ways is told once
    runner.train_dataloader.batch_sampler = type("B", (), {"sampler": runner.sampler})()
    runner.sampler.epochs.clear()
    runner.hooks[0].before_train_epoch(runner)
    assert runner.sampler.epochs == [3]


def test_empty_cache(make_runner, monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(1))
    runner = make_runner()
    hook = EmptyCacheHook(before_epoch=True, after_epoch=False, after_iter=True)
    hook.before_train_epoch(runner)
    hook.after_train_epoch(runner)
    hook.after_val_epoch(runner, metrics={})
    hook.after_train_iter(runner, 0, None, {})
    assert len(calls) == 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    hook.before_val_epoch(runner)
    assert len(calls) == 2


def test_param_scheduler_hook(make_runner, run_iters, monkeypatch):
    calls = []
    monkeypatch.setattr(psh, "_resolve_apply", lambda: lambda opt, s, t: calls.append((opt, s, t)))

    class Plateau:
        def __init__(self):
            self.metrics = []

        def step_metrics(self, metrics):
            self.metrics.append(metrics)

    hook = ParamSchedulerHook()
    runner = make_runner(hook, max_iters=3)
    plateau = Plateau()
    runner.param_schedulers = [object(), plateau]
    run_iters(runner, validate=lambda done: {"val/loss": 1.0 / done} if done > 1 else None)
    assert [t for _, _, t in calls] == [0, 1, 2]
    assert calls[0][0] is runner.optim_wrapper.optimizer and calls[0][1] is runner.param_schedulers
    assert plateau.metrics == [{"val/loss": 0.5}, {"val/loss": 1 / 3}]
    hook.after_val(runner, metrics={"val/loss": 0.1})  # outside training: ignored
    assert len(plateau.metrics) == 2


def test_param_scheduler_hook_real_apply(make_runner):
    pytest.importorskip("libai.optim")
    from libai.optim import apply_schedulers

    assert psh._resolve_apply() is apply_schedulers
    runner = make_runner(ParamSchedulerHook())
    runner.param_schedulers = []
    runner.call_hook("before_train")
    runner.call_hook("before_train_iter", batch_idx=0, data_batch=None)  # no schedulers: no-op


def test_default_hooks_build():
    built = {name: HOOKS.build(dict(cfg)) for name, cfg in DEFAULT_HOOKS.items()}
    assert set(built) == {
        "runtime_info",
        "timer",
        "logger",
        "param_scheduler",
        "checkpoint",
        "sampler_seed",
        "throughput",
        "nonfinite",
    }
    assert built["logger"].interval == 50 and built["nonfinite"].policy == "raise"
    assert built["checkpoint"].interval == -1 and built["checkpoint"].save_last
    assert all(isinstance(cfg, dict) for cfg in DEFAULT_HOOKS.values())


def test_everything_exported_is_registered():
    for name in hooks_pkg.__all__:
        if name.endswith("Hook") and name != "Hook":
            assert HOOKS.get(name) is getattr(hooks_pkg, name)
    assert "JsonlBackend" in LOG_BACKENDS and "TensorboardBackend" in LOG_BACKENDS


def test_misspelled_stage_is_rejected():
    with pytest.raises(ConfigError) as e:

        class Bad(Hook):
            def after_train_iters(self, runner):
                pass

    assert "after_train_iter" in str(e.value)


def test_priorities_order_the_built_ins():
    from libai.hooks import hook as hook_mod
    from libai.hooks.hook import get_priority

    order = [
        hook_mod.get_priority(h.priority)
        for h in (
            hooks_pkg.NonFiniteLossHook(),
            RuntimeInfoHook(),
            ParamSchedulerHook(),
            IterTimerHook(),
            hooks_pkg.LoggerHook(backends=[]),
            hooks_pkg.CheckpointHook(),
        )
    ]
    assert order == sorted(order)
    assert get_priority("VERY_LOW") == 90
