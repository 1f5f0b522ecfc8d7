import os

import pytest

from libai.hooks import CheckpointHook
from libai.utils.errors import ConfigError


def _files(runner):
    return sorted(f for f in os.listdir(runner.work_dir) if f.endswith(".pth"))


def test_interval_and_last(make_runner, run_iters):
    hook = CheckpointHook(interval=2)
    runner = make_runner(hook, max_iters=7)
    run_iters(runner)
    assert runner.saved == ["iter_2.pth", "iter_4.pth", "iter_6.pth", "iter_7.pth"]
    assert runner.checkpoints["iter_2.pth"]["iter"] == 1  # saved inside iteration 2 (0-based 1)


def test_last_not_saved_twice_and_not_on_empty_resume(make_runner, run_iters):
    hook = CheckpointHook(interval=2)
    runner = make_runner(hook, max_iters=4)
    run_iters(runner)
    assert runner.saved == ["iter_2.pth", "iter_4.pth"]
    run_iters(runner)  # resumed at the end: nothing to train, nothing to save
    assert runner.saved == ["iter_2.pth", "iter_4.pth"]


def test_save_begin(make_runner, run_iters):
    hook = CheckpointHook(interval=3, save_begin=4, save_last=False)
    runner = make_runner(hook, max_iters=12)
    run_iters(runner)
    assert runner.saved == ["iter_4.pth", "iter_7.pth", "iter_10.pth"]


def test_by_epoch(make_runner, run_iters):
    hook = CheckpointHook(interval=2, by_epoch=True)
    runner = make_runner(hook, max_iters=9, max_epochs=3, iters_per_epoch=3)
    run_iters(runner)
    assert runner.saved == ["epoch_2.pth", "epoch_3.pth"]


def test_max_keep_deletes_oldest_with_manifest(make_runner, run_iters):
    hook = CheckpointHook(interval=1, max_keep_ckpts=2)
    runner = make_runner(hook, max_iters=5)
    run_iters(runner)
    assert _files(runner) == ["iter_4.pth", "iter_5.pth"]
    assert not os.path.exists(os.path.join(runner.work_dir, "iter_1.pth.manifest.json"))
    assert hook.kept == ["iter_4.pth", "iter_5.pth"]
    # the state inside the newest checkpoint already lists what is kept after pruning
    assert runner.checkpoints["iter_5.pth"]["hooks"]["CheckpointHook"]["kept"] == hook.kept


def test_never_deletes_best(make_runner, run_iters):
    hook = CheckpointHook(interval=1, max_keep_ckpts=1, save_best="val/accuracy")
    runner = make_runner(hook, max_iters=4)
    scores = {1: 0.9, 2: 0.5, 3: 0.6, 4: 0.7}
    run_iters(runner, validate=lambda done: {"val/accuracy": scores[done]})
    assert _files(runner) == ["best_val_accuracy_iter_1.pth", "iter_4.pth"]
    assert hook.best_file == "best_val_accuracy_iter_1.pth" and hook.best_score == 0.9


def test_never_deletes_latest_pointer_target(make_runner, run_iters, monkeypatch):
    from libai.hooks import checkpoint_hook

    hook = CheckpointHook(interval=1, max_keep_ckpts=1)
    runner = make_runner(hook, max_iters=2)
    # something else points the latest pointer at iter_1.pth when iter_2 is pruned... the hook
    # must leave that file alone
    monkeypatch.setattr(
        checkpoint_hook,
        "_latest_target",
        lambda wd: os.path.join(os.path.abspath(wd), "iter_1.pth"),
    )
    run_iters(runner)
    assert _files(runner) == ["iter_1.pth", "iter_2.pth"]


def test_latest_pointer_names_the_newest_full_checkpoint_not_the_best(make_runner, run_iters):
    hook = CheckpointHook(interval=2, save_best="val/accuracy")
    runner = make_runner(hook, max_iters=4)
    latest = []

    def validate(done):
        scores = {1: 0.5, 2: 0.6, 3: 0.7, 4: 0.8}  # a new best at every validation
        return {"val/accuracy": scores[done]}

    def read_latest(*_):
        latest.append(open(os.path.join(runner.work_dir, "latest_checkpoint")).read().strip())

    runner.call_hook = _after(runner.call_hook, "after_val", read_latest)
    run_iters(runner, validate=validate)
    # at 1 and 3 the best is the newest state; at 2 and 4 iter_<n>.pth of that iteration wins
    assert latest == ["best_val_accuracy_iter_1.pth", "iter_2.pth",
                      "best_val_accuracy_iter_3.pth", "iter_4.pth"]
    assert hook.best_file == "best_val_accuracy_iter_4.pth"


def _after(call_hook, stage, fn):
    def wrapped(name, **kwargs):
        call_hook(name, **kwargs)
        if name == stage:
            fn()
    return wrapped


def test_best_replaces_previous_best(make_runner, run_iters):
    hook = CheckpointHook(save_best="val/loss", save_last=False)
    runner = make_runner(hook, max_iters=3)
    losses = {1: 0.5, 2: 0.3, 3: 0.4}
    run_iters(runner, validate=lambda done: {"val/loss": losses[done], "val/acc": 1.0})
    assert hook.rule == "less"
    assert _files(runner) == ["best_val_loss_iter_2.pth"]
    # the best checkpoint records itself as the best (state taken before writing)
    state = runner.checkpoints["best_val_loss_iter_2.pth"]["hooks"]["CheckpointHook"]
    assert state["best_file"] == "best_val_loss_iter_2.pth" and state["best_score"] == 0.3


def test_auto_and_nan(make_runner, run_iters):
    hook = CheckpointHook(save_best="auto", save_last=False)
    runner = make_runner(hook, max_iters=3)
    vals = {1: 0.2, 2: float("nan"), 3: 0.3}
    run_iters(runner, validate=lambda done: {"val/accuracy": vals[done], "val/loss": 1.0})
    assert hook.best_metric == "val/accuracy" and hook.rule == "greater"
    assert _files(runner) == ["best_val_accuracy_iter_3.pth"]


@pytest.mark.parametrize(
    ("metric", "rule"),
    [
        ("val/loss", "less"),
        ("val/top1_error", "less"),
        ("val/perplexity", "less"),
        ("val/digits/mse", "less"),
        ("val/accuracy", "greater"),
        ("val/f1", "greater"),
        ("val/mAP", "greater"),
    ],
)
def test_rule_inference(metric, rule):
    assert CheckpointHook(save_best=metric).rule == rule


def test_rule_errors():
    with pytest.raises(ConfigError, match="rule='greater' or rule='less'"):
        CheckpointHook(save_best="val/foo")
    with pytest.raises(ConfigError, match="Did you mean 'greater'"):
        CheckpointHook(save_best="val/foo", rule="greatr")
    assert CheckpointHook(save_best="val/foo", rule="less").rule == "less"
    with pytest.raises(ConfigError, match="interval"):
        CheckpointHook(interval=0)


def test_unknown_metric_suggests(make_runner, run_iters):
    hook = CheckpointHook(save_best="val/acuracy", rule="greater")
    runner = make_runner(hook, max_iters=1)
    with pytest.raises(ConfigError) as e:
        run_iters(runner, validate=lambda done: {"val/accuracy": 1.0, "val/loss": 0.1})
    msg = str(e.value)
    assert "'val/acuracy'" in msg and "Did you mean 'val/accuracy'" in msg and "val/loss" in msg


def test_not_saving_best_outside_training(make_runner, run_val):
    hook = CheckpointHook(save_best="val/accuracy")
    runner = make_runner(hook)
    run_val(runner, {"val/accuracy": 1.0})
    assert runner.saved == []


def test_state_round_trip_continues_pruning(make_runner, run_iters, tmp_path):
    hook = CheckpointHook(interval=1, max_keep_ckpts=2, save_best="val/accuracy")
    runner = make_runner(hook, max_iters=3)
    run_iters(runner, validate=lambda done: {"val/accuracy": done / 10})
    state = runner.checkpoints["iter_3.pth"]["hooks"]["CheckpointHook"]
    resumed = CheckpointHook(interval=1, max_keep_ckpts=2, save_best="val/accuracy")
    resumed.load_state_dict(state)
    assert resumed.kept == hook.kept and resumed.best_score == 0.2  # best at 3 saved after iter_3
    runner.hooks = [resumed]
    runner.train_loop.max_iters = 5
    run_iters(runner, validate=lambda done: {"val/accuracy": 0.0})
    assert [f for f in _files(runner) if f.startswith("iter")] == ["iter_4.pth", "iter_5.pth"]
