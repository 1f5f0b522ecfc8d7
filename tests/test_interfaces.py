"""Hooks and loops use only what the runner declares for them (libai.hooks.hook.RunnerView,
libai.loops.base.LoopRunner); the runner provides all of it; hooks never look for each other."""

import ast
import pathlib

import pytest

from libai.hooks.hook import RunnerView
from libai.loops.base import LoopRunner

ROOT = pathlib.Path(__file__).resolve().parents[1] / "libai"


def members(protocol: type) -> set[str]:
    names = set()
    for cls in protocol.__mro__:
        if cls.__module__ in ("typing", "builtins"):
            continue
        names |= set(getattr(cls, "__annotations__", {}))
        names |= {n for n in vars(cls) if not n.startswith("_")}
    return names


def runner_uses(path: pathlib.Path) -> dict[str, int]:
    """``runner.X`` (and ``self.runner.X``) read anywhere in the file, with a line; a
    ``getattr(runner, ...)`` counts as ``getattr`` (a defensive lookup: the interface is declared)."""
    used: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            base = node.value
            is_runner = (isinstance(base, ast.Name) and base.id == "runner") or (
                isinstance(base, ast.Attribute) and base.attr == "runner"
                and isinstance(base.value, ast.Name) and base.value.id == "self")
            if is_runner:
                used.setdefault(node.attr, node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr") and node.args
              and isinstance(node.args[0], ast.Name) and node.args[0].id == "runner"):
            used.setdefault(node.func.id, node.lineno)
    return used


HOOK_FILES = sorted((ROOT / "hooks").glob("*.py"))
LOOP_FILES = sorted((ROOT / "loops").glob("*.py"))


@pytest.mark.parametrize("path", HOOK_FILES, ids=lambda p: p.name)
def test_hooks_use_only_the_runner_view(path):
    allowed = members(RunnerView)
    extra = {name: line for name, line in runner_uses(path).items() if name not in allowed}
    assert not extra, (f"{path.name} uses runner members outside libai.hooks.hook.RunnerView "
                       f"(name: line): {extra}. Use a declared member, or declare it.")


@pytest.mark.parametrize("path", LOOP_FILES, ids=lambda p: p.name)
def test_loops_use_only_the_loop_runner(path):
    allowed = members(LoopRunner)
    extra = {name: line for name, line in runner_uses(path).items() if name not in allowed}
    assert not extra, (f"{path.name} uses runner members outside libai.loops.base.LoopRunner "
                       f"(name: line): {extra}. Use a declared member, or declare it.")


def test_preemption_uses_only_the_views():
    allowed = members(RunnerView) | members(LoopRunner)
    path = ROOT / "runner" / "preemption.py"
    extra = {n: line for n, line in runner_uses(path).items() if n not in allowed}
    assert not extra, f"preemption.py uses undeclared runner members: {extra}"


@pytest.mark.parametrize("path", HOOK_FILES, ids=lambda p: p.name)
def test_hooks_do_not_look_for_each_other(path):
    """A hook reaches another only through a declared service (runner.writer,
    runner.checkpointer), never by scanning the hook list for a class."""
    tree = ast.parse(path.read_text())
    hook_classes = {p.stem.title().replace("_", "") for p in HOOK_FILES} | {
        "LoggerHook", "CheckpointHook", "IterTimerHook"}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance" and len(node.args) == 2):
            kind = node.args[1]
            name = kind.id if isinstance(kind, ast.Name) else None
            assert name not in hook_classes, (
                f"{path.name}:{node.lineno} looks for a {name} among the hooks")


def test_the_protocols_are_short_and_disjoint_from_private_names():
    for protocol in (RunnerView, LoopRunner):
        names = members(protocol)
        assert not [n for n in names if n.startswith("_")]
        assert len(names) <= 30, f"{protocol.__name__} grew to {len(names)} members"


def test_a_built_runner_provides_both_views(tmp_path):
    from libai.runner import Runner
    from libai.testing import toy_config

    runner = Runner.from_cfg(toy_config(work_dir=str(tmp_path)))
    missing = [n for n in sorted(members(RunnerView) | members(LoopRunner)) if not hasattr(runner, n)]
    assert not missing, f"the runner lacks declared members: {missing}"
    assert runner.writer is not None and runner.checkpointer.schedule is not None
    assert runner.checkpointer.work_dir == runner.work_dir


def test_services_follow_registered_hooks(tmp_path):
    """A LoggerHook or CheckpointHook registered after the build serves the others as well."""
    from libai.hooks import CheckpointHook, LoggerHook
    from libai.runner import Runner
    from libai.testing import toy_config

    runner = Runner.from_cfg(toy_config(work_dir=str(tmp_path),
                                        default_hooks=dict(logger=None, checkpoint=None)))
    assert runner.writer is None and runner.checkpointer.schedule is None
    logger, checkpoint = LoggerHook(), CheckpointHook(interval=5)
    runner.register_hook(logger)
    runner.register_hook(checkpoint)
    assert runner.writer is logger and runner.checkpointer.schedule is checkpoint
