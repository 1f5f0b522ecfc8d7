"""Fail fast, one line, the key named (issue 17): what is checked when a run is built, how a
rejected value is named, and malformed YAML/JSON."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from libai.config import Config
from libai.registry import Registry
from libai.runner import Runner
from libai.runner.preflight import check_device, check_torchrun_env
from libai.testing import toy_config
from libai.utils.errors import BuildError, CheckpointError, ConfigError, LibaiError, RegistryError
from libai.utils.paths import check_output_path

ROOT = Path(__file__).resolve().parents[2]


def _refused(tmp_path, error=ConfigError, **overrides) -> str:
    cfg = toy_config(work_dir=str(tmp_path / "work"), **overrides)
    with pytest.raises(error) as exc:
        Runner.from_cfg(Config(cfg))
    assert not (tmp_path / "work").exists(), "refused before anything was written"
    return str(exc.value)


@pytest.mark.parametrize("key, value, expected", [
    ("log_level", "LOUD", "log_level='LOUD' is not one of 'DEBUG', 'INFO'"),
    ("compile", "yes", "Write compile=True"),
    ("compile", {"mod": "max-autotune"}, "compile.mod is not a torch.compile argument. Did you "
                                         "mean 'mode'?"),
    ("compile", {"mode": "fastest"}, "compile.mode='fastest' is not one of"),
    ("device", "gpu", "device='gpu' is not one of"),
    ("randomness", {"seed": "zero"}, "randomness.seed='zero'"),
    ("resume_options", {"damaged": "delete"}, "resume_options.damaged='delete'"),
    ("resume_options", {"alow_changes": []}, "Did you mean 'allow_changes'?"),
    ("activation_checkpointing", "block", "activation_checkpointing='block': expected None, "
                                          "'blocks' or dict(modules="),
    ("parallel", {"fdsp": 2}, "parallel has an unknown key 'fdsp'. Did you mean 'fsdp'?"),
    ("parallel", {"fsdp": 2}, "fsdp=2 x tensor=1 = 2 does not divide the 1 process(es)"),
])
def test_bad_values_are_refused_before_anything_is_built(tmp_path, key, value, expected):
    assert expected in _refused(tmp_path, **{key: value})


def test_unknown_model_type_is_refused_before_the_run_folder_exists(tmp_path):
    message = _refused(tmp_path, RegistryError, model=dict(type="ToyModle"))
    assert message.startswith("model.type='ToyModle'") and "Did you mean 'ToyModel'" in message


def test_negative_fast_dev_run_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"fast_dev_run=-1: expected a whole number >= 0"):
        Runner.from_cfg(Config(toy_config(work_dir=str(tmp_path))), fast_dev_run=-1)


def test_missing_load_from_suggests_a_close_checkpoint(tmp_path):
    (tmp_path / "iter_20.pth").write_bytes(b"x")
    message = _refused(tmp_path, CheckpointError, load_from=str(tmp_path / "iter_2O.pth"))
    assert "load_from=" in message and "Did you mean 'iter_20.pth'?" in message


@pytest.mark.parametrize("options, expected", [
    (dict(pth="x.pth"), "load_from.pth is not an option of load_from. Did you mean 'path'?"),
    (dict(path="x.pth", stict=False), "load_from.stict is not an option of load_from. Did you "
                                     "mean 'strict'?"),
    (dict(path="x.pth", strict="no"), "load_from.strict='no': expected True"),
])
def test_load_from_dict_with_a_misspelled_key_names_the_key(tmp_path, options, expected):
    """The key is blamed (with a did-you-mean), not the file, and before anything is written."""
    message = _refused(tmp_path, load_from=options)
    assert message.startswith(expected) and "no such file" not in message


def test_device_that_does_not_exist_says_how_many_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"device='cuda:7' but this machine has no usable GPU"):
        check_device("cuda:7")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"has 2 GPUs \(cuda:0 to cuda:1\)"):
        check_device("cuda:7")
    check_device("cuda:1")


def test_half_set_torchrun_environment_names_what_is_missing():
    with pytest.raises(ConfigError) as exc:
        check_torchrun_env({"WORLD_SIZE": "2", "RANK": "0"})
    message = str(exc.value)
    assert "MASTER_ADDR, MASTER_PORT are not" in message and "torchrun" in message
    full = {"WORLD_SIZE": "2", "RANK": "5", "LOCAL_RANK": "0", "MASTER_ADDR": "localhost",
            "MASTER_PORT": "29500"}
    with pytest.raises(ConfigError, match="RANK=5 but WORLD_SIZE=2"):
        check_torchrun_env(full)
    check_torchrun_env({**full, "RANK": "1"})
    check_torchrun_env({"WORLD_SIZE": "1"})  # one process, whatever else is set


def test_work_dir_that_is_a_file_or_below_one(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    for work_dir, expected in ((afile, "is a file, not a folder"),
                               (afile / "run", f"'{afile}' is a file, not a folder")):
        with pytest.raises(ConfigError, match="work_dir=") as exc:
            Runner.from_cfg(Config(toy_config(work_dir=str(work_dir))))
        assert expected in str(exc.value)
    assert afile.read_text() == "keep me"


def test_unwritable_folder_is_named(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() != 0:  # a real permission check; root may write anywhere
        locked.chmod(0o555)
    else:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, m: False if str(p) == str(locked)
                            else real(p, m))
    try:
        with pytest.raises(ConfigError, match=f"no permission to write in '{locked}'"):
            check_output_path(locked / "run", "work_dir", folder=True)
    finally:
        locked.chmod(0o755)


def _load_tool(name: str):
    spec = importlib.util.spec_from_file_location(f"tool_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_test_tool_checks_dump_path_before_evaluating(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    test_tool = _load_tool("test")
    work = tmp_path / "work"
    with pytest.raises(ConfigError, match=r"--dump=.*is a file, not a folder"):
        test_tool.main([str(ROOT / "configs/digits_mlp.py"), str(afile), "--work-dir", str(work),
                        "--dump", str(afile / "preds.pt")])
    assert not work.exists()  # no run was even started


def test_test_tool_names_its_checkpoint_argument_and_the_close_file(tmp_path):
    (tmp_path / "iter_10.pth").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"^checkpoint='.*iter_10\.ph': no such file\. "
                                              r"Did you mean 'iter_10\.pth'\?"):
        _load_tool("test").main([str(ROOT / "configs/digits_mlp.py"), str(tmp_path / "iter_10.ph"),
                                 "--work-dir", str(tmp_path / "work")])
    assert not (tmp_path / "work").exists()


def test_cli_prints_one_line_and_exits_2_for_a_half_set_torchrun_env(tmp_path, run_tool,
                                                                      monkeypatch):
    for name in ("LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    proc = run_tool("tools/train.py", "configs/digits_mlp.py", "--work-dir", tmp_path / "w",
                    env=dict(WORLD_SIZE="2", RANK="0"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: WORLD_SIZE=2 is set but MASTER_ADDR")


# ---------------------------------------------------------------- rejected values, named
def test_rejected_value_names_path_argument_and_default():
    reg = Registry("optimizer")
    reg.register_module(module=torch.optim.AdamW)
    params = [torch.nn.Parameter(torch.zeros(2))]
    with pytest.raises(BuildError) as exc:
        reg.build(dict(type="AdamW", params=params, lr="fast"), path="optim_wrapper.optimizer")
    message = str(exc.value)
    assert message.startswith(
        "optim_wrapper.optimizer.lr='fast': expected a number (AdamW's default is 0.001).")
    assert isinstance(exc.value.__cause__, TypeError)  # torch's own error, for --debug


def test_plain_annotation_is_checked_before_the_call():
    reg = Registry("model")
    calls = []

    @reg.register_module()
    class Net:
        def __init__(self, depth: int = 2, name: str | None = None):
            calls.append(depth)

    with pytest.raises(BuildError, match=r"model.depth='deep': expected a whole number \(Net's "
                                         r"default is 2\)"):
        reg.build(dict(type="Net", depth="deep"), path="model")
    reg.build(dict(type="Net", depth=3, name=None), path="model")
    assert calls == [3]


def test_negative_size_is_named_even_when_torch_does_not():
    reg = Registry("model")
    reg.register_module(module=torch.nn.Linear)
    with pytest.raises(BuildError, match=r"^model.out_features=-3: expected a finite number >= 0"):
        reg.build(dict(type="Linear", in_features=4, out_features=-3), path="model")


def test_a_bug_in_a_constructor_keeps_its_traceback():
    reg = Registry("model")

    @reg.register_module()
    class Buggy:
        def __init__(self, depth=2):
            self.missing_attribute.append(depth)

    with pytest.raises(AttributeError):  # not turned into a friendly line that hides the bug
        reg.build(dict(type="Buggy", depth=3), path="model")
    with pytest.raises(BuildError, match="model.depth='x': expected a number"):
        reg.build(dict(type="Buggy", depth="x"), path="model")  # a wrong kind explains it


# ------------------------------------------------------------------ malformed YAML / JSON
@pytest.mark.parametrize("name, text, where", [
    ("bad.yaml", "model:\n  type: X\n  hidden: [1, 2\nwork_dir: a\n", "line 4 column 9"),
    ("bad.json", '{"model": {"type": "X",}\n}', "line 1 column 24"),
])
def test_malformed_data_config_gives_file_line_and_column(tmp_path, name, text, where):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(LibaiError) as exc:
        Config.fromfile(path)
    message = str(exc.value)
    assert str(path) in message and where in message
    assert len(message.splitlines()) <= 3 and message.splitlines()[-1].strip() == "^"


# ------------------------------------------------------------------- OS errors, one line
def test_os_errors_a_user_causes_are_one_line_and_others_keep_the_traceback(capsys):
    from libai.utils.cli import run_cli

    def denied(argv):
        raise PermissionError(13, "Permission denied", "/data/run/log.txt")

    with pytest.raises(SystemExit) as exc:
        run_cli(denied, [])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: Permission denied: '/data/run/log.txt'. Fix: make it accessible "
                   "(chmod) or choose another path."]
    with pytest.raises(PermissionError):
        run_cli(denied, ["--debug"])

    def reset(argv):
        raise ConnectionResetError(104, "Connection reset by peer")

    with pytest.raises(ConnectionResetError):  # not one a user fixes: the traceback stays
        run_cli(reset, [])
