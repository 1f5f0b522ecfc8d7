"""The `libai` command (libai/cli): the dispatcher, shipped configs by name from any folder, one-line
errors, the tools as shims of it, and a non-editable install that trains from an empty folder.

Real processes: `python -m libai` once, and the installed console script; the rest in this process."""

import os
import shutil
from pathlib import Path

import pytest

from libai.cli import COMMANDS, main
from libai.cli.configs import resolve_config, shipped_configs
from libai.utils.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _libai(*argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_help_lists_every_command(capsys):
    status, out, _ = _libai("--help", capsys=capsys)
    assert status == 0
    for name in COMMANDS:
        assert f"  {name} " in out
    assert {"train", "test", "print-config", "generate", "convert", "sweep", "lr-find",
            "analyze-logs", "summary", "browse", "preprocess-text"} <= set(COMMANDS)


def test_every_tool_has_a_command_and_stays_small():
    modules = {module for module, _ in COMMANDS.values()}
    for path in sorted((ROOT / "tools").glob("*.py")):
        assert len(path.read_text().splitlines()) <= 150, f"{path.name}: move its logic into libai/"
        if path.stem != "gen_reference":  # writes docs/reference.md of a checkout: no command
            assert path.stem in modules, f"tools/{path.name} has no `libai` command"


def test_unknown_command_is_one_line_with_a_suggestion(capsys):
    status, out, err = _libai("trian", "digits_mlp", capsys=capsys)
    assert status == 2 and not out
    assert err == "error: unknown command 'trian'. Did you mean 'train'? See libai --help.\n"


def test_unknown_config_name_is_one_line_with_a_suggestion(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status, _, err = _libai("print-config", "bert_tinyy", capsys=capsys)
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: config 'bert_tinyy' not found") and "'bert_tiny'" in err


@pytest.mark.parametrize("ref", ["digits_mlp", "digits_mlp.py", "libai::digits_mlp.py",
                                 "configs/digits_mlp.py"])
def test_shipped_config_by_name_from_an_empty_folder(ref, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status, out, _ = _libai("print-config", ref, "--cfg-options", "model.hidden=32",
                            capsys=capsys)
    assert status == 0
    assert out.startswith("# ") and out.splitlines()[0].endswith("digits_mlp.py")
    assert "hidden=32" in out


def test_a_file_in_the_working_folder_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "digits_mlp.py").write_text('_base_ = "libai::digits_mlp.py"\n')
    assert resolve_config("digits_mlp.py") == "digits_mlp.py"
    assert resolve_config("digits_mlp") != "digits_mlp.py"  # no such file: the shipped one
    assert resolve_config("sweeps/digits_lr").endswith(os.path.join("sweeps", "digits_lr.py"))
    assert "bert_tiny.py" in shipped_configs() and not any("_base_" in n for n in shipped_configs())
    assert resolve_config("missing/folder.py") == "missing/folder.py"  # the loader explains it
    with pytest.raises(ConfigError, match="Shipped configs: "):
        resolve_config("zzzz")


def test_python_m_libai_trains_a_shipped_config_from_an_empty_folder(run_process, tmp_path):
    proc = run_process("-m", "libai", "train", "digits_mlp", "--fast-dev-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.output
    assert "Iter [2/" in proc.output
    assert not list(tmp_path.iterdir())  # --fast-dev-run writes nothing


def test_usage_names_the_command(capsys):
    status, _, err = _libai("train", capsys=capsys)
    assert status == 2 and err.startswith("usage: libai train ")


def test_non_editable_install_trains_by_name_from_an_empty_folder(run_process, tmp_path):
    """pip install (not -e) into a folder: the console script, the shipped configs inside the
    package, nothing read from the checkout."""
    src, target, cwd = tmp_path / "src", tmp_path / "site", tmp_path / "cwd"
    cwd.mkdir()
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "work_dirs", "build", "dist", "*.egg-info", "__pycache__", ".*cache*", "tests",
        "docs", "benchmarks"))
    run_process("-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                target, src).check()
    script = target / "bin" / "libai"
    assert script.is_file()
    env = dict(PYTHONPATH=str(target))  # the installed copy only, not the checkout
    where = run_process("-c", "import libai; print(libai.__file__)", cwd=cwd, env=env).check()
    assert where.stdout.strip().startswith(str(target))
    shown = run_process(script, "print-config", "bert_tiny", cwd=cwd, env=env, python=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == f"# {target / 'libai' / 'configs' / 'bert_tiny.py'}"
    proc = run_process(script, "train", "digits_mlp", "--fast-dev-run", cwd=cwd, env=env,
                       python=False)
    assert proc.returncode == 0, proc.output
    assert "Iter [2/" in proc.output
    assert not list(cwd.iterdir())


def test_the_analysis_api_keeps_its_names_after_every_submodule_is_imported():
    import libai.analysis.browse  # noqa: F401
    import libai.analysis.model_summary  # noqa: F401
    from libai.analysis import cal_train_time, load_runs, plot_curve, summary

    assert all(callable(f) for f in (cal_train_time, load_runs, plot_curve, summary))
    assert not hasattr(summary, "__path__") and summary.__module__ == "libai.analysis.logs"


def test_a_default_hook_is_a_key_without_plus(run_tool, tmp_path):
    """`--cfg-options default_hooks.throughput=None` switches off a default hook the config file
    does not list, as its natural spelling says (issue 27); a misspelled hook is still refused."""
    from libai.cli.configs import load_config

    cfg = load_config("digits_mlp", {"default_hooks.throughput": None,
                                     "default_hooks.logger.interval": 5})
    assert cfg.default_hooks.throughput is None and cfg.default_hooks.logger.interval == 5
    with pytest.raises(ConfigError, match="throughputt"):
        load_config("digits_mlp", {"default_hooks.throughputt": None})
    proc = run_tool("libai", "train", "digits_mlp", "--fast-dev-run", "--cfg-options",
                    "default_hooks.throughput=None", cwd=tmp_path).check()
    assert "ThroughputHook" not in proc.output and "Iter [2/2]" in proc.output
