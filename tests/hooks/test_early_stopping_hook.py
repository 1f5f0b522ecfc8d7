import pytest

from libai.hooks import EarlyStoppingHook
from libai.utils.errors import ConfigError


def _feed(make_runner, run_iters, hook, scores, key="val/accuracy"):
    """One validation after each iteration with the given scores; returns the runner."""
    runner = make_runner(hook, max_iters=len(scores))
    run_iters(runner, validate=lambda done: {key: scores[done - 1]})
    return runner


def test_patience(make_runner, run_iters):
    hook = EarlyStoppingHook("val/accuracy", patience=2)
    runner = _feed(make_runner, run_iters, hook, [0.5, 0.6, 0.6, 0.55, 0.9, 0.95])
    assert runner.should_stop and runner.iter == 4  # 0.6 then 0.55: two without improvement
    msg = runner.messages[-1]
    assert "Early stopping at iteration 4" in msg and "2 validation(s)" in msg and "best 0.6" in msg


def test_improvement_resets_wait(make_runner, run_iters):
    hook = EarlyStoppingHook("val/loss", patience=2)  # less is better
    runner = _feed(make_runner, run_iters, hook, [1.0, 1.1, 0.9, 0.95, 0.8], key="val/loss")
    assert not runner.should_stop and hook.best_score == 0.8 and hook.wait_count == 0


def test_min_delta(make_runner, run_iters):
    hook = EarlyStoppingHook("val/accuracy", patience=2, min_delta=0.05)
    runner = _feed(make_runner, run_iters, hook, [0.5, 0.54, 0.53, 0.7])
    # 0.54 and 0.53 are within 0.05 of 0.5
    assert runner.should_stop and runner.iter == 3 and hook.best_score == 0.5


def test_threshold(make_runner, run_iters):
    hook = EarlyStoppingHook("val/loss", stopping_threshold=0.1)
    runner = _feed(make_runner, run_iters, hook, [0.5, 0.09, 0.05], key="val/loss")
    assert runner.should_stop and runner.iter == 2
    assert "reached stopping_threshold 0.1" in runner.messages[-1]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite(make_runner, run_iters, bad):
    hook = EarlyStoppingHook("val/accuracy", patience=10)
    runner = _feed(make_runner, run_iters, hook, [0.5, bad, 0.7])
    assert runner.should_stop and runner.iter == 2 and "diverged" in runner.messages[-1]


def test_non_finite_ignored_without_check(make_runner, run_iters):
    hook = EarlyStoppingHook("val/accuracy", patience=10, check_finite=False)
    runner = _feed(make_runner, run_iters, hook, [0.5, float("nan"), 0.7])
    assert not runner.should_stop and hook.best_score == 0.7


def test_missing_metric(make_runner, run_iters):
    hook = EarlyStoppingHook("val/acc", rule="greater")
    runner = _feed(make_runner, run_iters, hook, [0.5, 0.4])
    warnings = [m for m in runner.messages if "inactive" in m]
    assert len(warnings) == 1 and "Did you mean 'val/accuracy'" in warnings[0]
    strict = EarlyStoppingHook("val/acc", rule="greater", strict=True)
    with pytest.raises(ConfigError, match="Did you mean 'val/accuracy'"):
        _feed(make_runner, run_iters, strict, [0.5])


def test_config_errors():
    with pytest.raises(ConfigError, match="rule='greater' or rule='less'"):
        EarlyStoppingHook("val/widgets")
    with pytest.raises(ConfigError, match="patience"):
        EarlyStoppingHook("val/loss", patience=0)
    with pytest.raises(ConfigError, match="min_delta"):
        EarlyStoppingHook("val/loss", min_delta=-1)


def test_state_round_trip(make_runner, run_iters):
    hook = EarlyStoppingHook("val/accuracy", patience=3)
    _feed(make_runner, run_iters, hook, [0.5, 0.4, 0.3])
    resumed = EarlyStoppingHook("val/accuracy", patience=3)
    resumed.load_state_dict(hook.state_dict())
    assert (resumed.best_score, resumed.wait_count) == (0.5, 2)
    runner = _feed(make_runner, run_iters, resumed, [0.45])
    assert runner.should_stop
