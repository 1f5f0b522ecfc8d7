"""run_cli (libai.utils.cli), tools/print_config.py, and the config package's layering."""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import pytest

from libai.utils.cli import run_cli
from libai.utils.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
PRINT_CONFIG = REPO / "tools" / "print_config.py"
DATA = Path(__file__).parent / "data"


def _fails(argv):
    raise ConfigError("no key 'lr'. Did you mean 'base_lr'?")


def test_run_cli_exits_with_main_status():
    with pytest.raises(SystemExit) as info:
        run_cli(lambda argv: 3, argv=[])
    assert info.value.code == 3
    with pytest.raises(SystemExit) as info:
        run_cli(lambda argv: None, argv=["x"])
    assert info.value.code == 0


def test_run_cli_passes_argv():
    seen = []
    with pytest.raises(SystemExit):
        run_cli(seen.append, argv=["a", "--debug"])
    assert seen == [["a", "--debug"]]


def test_run_cli_prints_libai_errors_in_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        run_cli(_fails, argv=["cfg.py"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == "error: no key 'lr'. Did you mean 'base_lr'?\n"


def test_run_cli_debug_reraises():
    with pytest.raises(ConfigError, match="base_lr"):
        run_cli(_fails, argv=["cfg.py", "--debug"])


def test_run_cli_debug_flag_is_read_from_sys_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["tool", "--debug"])
    with pytest.raises(ConfigError):
        run_cli(_fails)


def test_run_cli_keyboard_interrupt(capsys):
    def interrupted(argv):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as info:
        run_cli(interrupted, argv=[])
    assert info.value.code == 130
    assert "interrupted" in capsys.readouterr().err


def test_run_cli_lets_bugs_show_their_traceback():
    def buggy(argv):
        raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        run_cli(buggy, argv=[])


class _Built:
    """Stands for a runner: what main builds, in a reference cycle as a runner is."""

    def __init__(self):
        self.me = self


def _build_then(outcome, built):
    def main(argv):
        obj = _Built()
        built.append(weakref.ref(obj))
        if outcome is not None:
            raise outcome("stop")
        return 0

    return main


@pytest.mark.parametrize(
    "outcome, status",
    [(None, 0), (ConfigError, 2), (KeyboardInterrupt, 130)],
    ids=["success", "libai-error", "ctrl-c"],
)
def test_run_cli_teardown_runs_last_once_main_releases_what_it_built(outcome, status):
    built, seen_by_teardown = [], []

    def teardown(code):
        gc.collect()  # as destroy_dist does: the cycle goes once nothing else holds it
        seen_by_teardown.append((built[0]() is None, code))

    with pytest.raises(SystemExit) as info:
        run_cli(_build_then(outcome, built), argv=[], teardown=teardown)
    assert info.value.code == status
    assert seen_by_teardown == [(True, status)]  # told the status: it waits for peers on 0 only


def test_run_cli_teardown_runs_after_a_bug_too():
    calls = []
    with pytest.raises(ValueError):
        run_cli(_build_then(ValueError, []), argv=[], teardown=calls.append)
    assert calls == [1]  # a bug's status: the teardown does not wait for the other ranks


def test_print_config_prints_merged_config(run_tool):
    proc = run_tool(PRINT_CONFIG, DATA / "inherit" / "leaf.yaml", "--cfg-options", "model.hidden=7")
    assert proc.returncode == 0, proc.stderr
    assert "model = dict(" in proc.stdout and "hidden=7" in proc.stdout
    assert "width=64" in proc.stdout
    compile(proc.stdout, "<printed>", "exec")


def test_print_config_typo_in_cfg_options_is_one_line_with_suggestion(run_process):
    """The tool as a process (the other print_config tests run it in-process): its exit status
    and the two streams a user sees."""
    proc = run_process(PRINT_CONFIG, DATA / "inherit" / "child.py", "--cfg-options",
                       "train_cfg.max_iter=5", timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert "train_cfg.max_iter" in lines[0] and "Did you mean 'max_iters'" in lines[0]
    assert "Traceback" not in proc.stderr


def test_print_config_debug_shows_traceback(run_tool):
    proc = run_tool(PRINT_CONFIG, DATA / "inherit" / "child.py", "--cfg-options",
                    "train_cfg.max_iter=5", "--debug")
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "ConfigError" in proc.stderr


def test_config_package_does_not_import_registry(run_process):
    # a fresh interpreter: this one has imported everything (it imports no torch: 0.1 s)
    code = "import sys, libai.config; print('libai.registry' in sys.modules)"
    out = run_process("-c", code, cwd=REPO)
    assert out.stdout.strip() == "False", out.stderr
