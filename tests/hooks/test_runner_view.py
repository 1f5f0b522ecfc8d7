"""The fake runner of tests/hooks offers what libai.hooks.hook.RunnerView declares, so a hook
that passes there uses nothing a real runner lacks (tests/test_interfaces.py holds the rest)."""

from libai.hooks.hook import RunnerView


def test_the_hooks_test_runner_follows_the_view(make_runner):
    runner = make_runner()
    declared = set(RunnerView.__annotations__) | {n for n in vars(RunnerView) if not n.startswith("_")}
    missing = [n for n in sorted(declared) if not hasattr(runner, n)]
    assert not missing, f"tests/hooks/conftest.py's FakeRunner lacks {missing}"
