"""custom_imports: modules named by a config are imported before the runner builds anything; a
module next to the config or in the working directory needs no PYTHONPATH; dotted ``type``
paths resolve from the working directory too."""

import os
import sys
import textwrap
import uuid

import pytest

from libai.config import Config
from libai.registry import HOOKS, MODELS
from libai.runner import Runner
from libai.runner.imports import import_custom_modules
from libai.testing import toy_config
from libai.utils.errors import ConfigError, RegistryError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUIET = dict(logger=dict(interval=5, progress_bar=False, plot=False))

HOOK_MODULE = """
from libai.hooks import Hook
from libai.registry import HOOKS


@HOOKS.register_module()
class {name}(Hook):
    def before_run(self, runner):
        runner.logger.info("{name} ran")
"""


@pytest.fixture
def fresh():
    """A unique name per test; whatever it registered or imported is removed afterwards."""
    name = f"Custom{uuid.uuid4().hex[:8]}"
    path, modules = list(sys.path), set(sys.modules)
    yield name
    for registry in (HOOKS, MODELS):
        for key in [k for k in registry._module_dict if k.startswith(name)]:
            del registry._module_dict[key]
    for mod in set(sys.modules) - modules:
        if name.lower() in mod:
            del sys.modules[mod]
    assert sys.path == path, "sys.path was not restored"


def write(folder, filename, text):
    path = folder / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_module_next_to_the_config_registers_a_hook(tmp_path, fresh, monkeypatch):
    cfg_dir, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    elsewhere.mkdir()
    write(cfg_dir, f"{fresh.lower()}_hooks.py", HOOK_MODULE.format(name=fresh))
    cfg_file = write(cfg_dir, "run.py", f"""
        custom_imports = dict(imports=["{fresh.lower()}_hooks"], allow_failed_imports=False)
        custom_hooks = [dict(type="{fresh}")]
    """)
    monkeypatch.chdir(elsewhere)  # neither the config's folder nor the module is on sys.path
    cfg = Config.fromfile(cfg_file)
    for key, value in toy_config(work_dir=str(tmp_path / "work"), default_hooks=QUIET).items():
        cfg[key] = value
    runner = Runner.from_cfg(cfg)
    assert fresh in [type(h).__name__ for h in runner.hooks]
    assert runner.cfg.custom_imports.imports == [f"{fresh.lower()}_hooks"]


def test_module_in_the_working_directory_with_a_dict_config(tmp_path, fresh, monkeypatch):
    write(tmp_path, f"{fresh.lower()}_pkg/__init__.py", "")
    write(tmp_path, f"{fresh.lower()}_pkg/models.py", f"""
        from libai.registry import MODELS
        from libai.testing import ToyModel


        @MODELS.register_module()
        class {fresh}Net(ToyModel):
            pass
    """)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    runner = Runner.from_cfg(toy_config(
        work_dir=str(tmp_path / "work"), default_hooks=QUIET,
        custom_imports=dict(imports=[f"{fresh.lower()}_pkg.models"]),
        model=dict(type=f"{fresh}Net"),
    ))
    assert type(runner.unwrapped_model).__name__ == f"{fresh}Net"
    assert str(tmp_path) not in sys.path


def test_dotted_type_path_resolves_from_the_working_directory(tmp_path, fresh, monkeypatch):
    write(tmp_path, f"{fresh.lower()}_pkg/__init__.py", "")
    write(tmp_path, f"{fresh.lower()}_pkg/models.py", """
        from libai.testing import ToyModel


        class MyNet(ToyModel):
            pass
    """)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    net = MODELS.build(dict(type=f"{fresh.lower()}_pkg.models.MyNet"))
    assert type(net).__name__ == "MyNet"
    assert str(tmp_path) not in sys.path
    with pytest.raises(RegistryError) as exc:
        MODELS.build(dict(type=f"{fresh.lower()}_nope.models.MyNet"))
    assert "cannot be imported" in str(exc.value) and str(tmp_path) in str(exc.value)


def test_missing_module_is_one_line_naming_the_folders(tmp_path, fresh, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config_file = tmp_path / "configs" / "run.py"
    with pytest.raises(ConfigError) as exc:
        import_custom_modules(dict(imports=[f"{fresh.lower()}_missing"]), config_file)
    msg = str(exc.value)
    assert "\n" not in msg
    assert f"cannot import '{fresh.lower()}_missing'" in msg
    assert str(tmp_path / "configs") in msg and str(tmp_path) in msg
    assert f"No module named '{fresh.lower()}_missing'" in msg
    assert "allow_failed_imports=True" in msg


def test_missing_module_is_refused_by_the_runner(tmp_path, fresh):
    with pytest.raises(ConfigError, match=f"cannot import '{fresh.lower()}_missing'"):
        Runner.from_cfg(toy_config(work_dir=str(tmp_path), default_hooks=QUIET,
                                   custom_imports=dict(imports=[f"{fresh.lower()}_missing"])))


def test_allow_failed_imports_warns_and_goes_on(tmp_path, fresh, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, f"{fresh.lower()}_ok.py", "VALUE = 1\n")
    with pytest.warns(UserWarning, match=f"cannot import '{fresh.lower()}_missing'.*Going on"):
        mods = import_custom_modules(
            dict(imports=[f"{fresh.lower()}_missing", f"{fresh.lower()}_ok"], allow_failed_imports=True))
    assert [m.__name__ for m in mods] == [f"{fresh.lower()}_ok"]


def test_error_inside_the_module_is_named(tmp_path, fresh, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, f"{fresh.lower()}_dep.py", "import no_such_dependency_xyz\n")
    write(tmp_path, f"{fresh.lower()}_bug.py", "VALUE = 1 / 0\n")
    with pytest.raises(ConfigError) as exc:
        import_custom_modules(dict(imports=[f"{fresh.lower()}_dep"]))
    assert f"importing '{fresh.lower()}_dep' failed" in str(exc.value)
    assert "No module named 'no_such_dependency_xyz'" in str(exc.value)
    # a bug in the module is an error even when failed imports are allowed
    with pytest.raises(ConfigError, match="ZeroDivisionError: division by zero"):
        import_custom_modules(dict(imports=[f"{fresh.lower()}_bug"], allow_failed_imports=True))


@pytest.mark.parametrize("spec, expected", [
    (["my_module"], r"must be a dict .*got list .*custom_imports=dict\(imports=\[...\]\)"),
    (dict(import_=["m"]), r"unknown key 'import_'\. Did you mean 'imports'\?"),
    (dict(imports=["m"], allow_failed_import=True),
     r"unknown key 'allow_failed_import'\. Did you mean 'allow_failed_imports'\?"),
    (dict(), r"needs an 'imports' key"),
    (dict(imports=[1]), r"must be a list of module names"),
    (dict(imports=None), r"must be a list of module names"),
    (dict(imports=["my_pkg/my_module.py"]), r"is a file path.*'my_pkg\.my_module'"),
    (dict(imports=["m"], allow_failed_imports="yes"), r"must be True or False"),
])
def test_bad_shapes(spec, expected):
    with pytest.raises(ConfigError, match=expected):
        import_custom_modules(spec)


def test_one_name_as_a_string_and_none(tmp_path, fresh, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, f"{fresh.lower()}_one.py", "VALUE = 1\n")
    assert [m.VALUE for m in import_custom_modules(dict(imports=f"{fresh.lower()}_one"))] == [1]
    assert import_custom_modules(None) == []


def test_typo_of_the_top_level_key_suggests_it(tmp_path):
    with pytest.raises(ConfigError, match="Did you mean 'custom_imports'"):
        Runner.from_cfg(toy_config(work_dir=str(tmp_path), custom_import=dict(imports=["x"])))


def test_train_and_print_config_tools(tmp_path, fresh, run_tool):
    """As a user runs them: a hook module next to the config, a model package in the working
    directory named by a dotted path, no PYTHONPATH (in this process neither folder is on
    sys.path: the tools find them as a new interpreter would)."""
    hooks, pkg = f"{fresh.lower()}_hooks", f"{fresh.lower()}_pkg"  # removed by fresh
    project = tmp_path / "project"
    write(project, f"configs/{hooks}.py", HOOK_MODULE.format(name=fresh))
    write(project, f"{pkg}/__init__.py", "")
    write(project, f"{pkg}/models.py", """
        from libai.testing import ToyModel


        class MyNet(ToyModel):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                print("MyNet built")
    """)
    cfg = write(project, "configs/run.py", f"""
        _base_ = "libai::digits_mlp.py"
        custom_imports = dict(imports=["{hooks}"])
        custom_hooks = [dict(type="{fresh}")]
        model = dict(_delete_=True, type="{pkg}.models.MyNet", in_features=64, num_classes=10)
    """)
    assert not {str(project), str(project / "configs")} & set(sys.path)

    out = run_tool(os.path.join(ROOT, "tools", "print_config.py"), cfg, cwd=project)
    assert out.returncode == 0, out.stderr
    assert "custom_imports" in out.stdout and hooks in out.stdout
    out = run_tool(os.path.join(ROOT, "tools", "train.py"), cfg, "--fast-dev-run",
                   "--work-dir", tmp_path / "work", cwd=project)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{fresh} ran" in out.stdout + out.stderr
    assert "MyNet built" in out.stdout

    write(project, "configs/bad.py", f"""
        _base_ = "run.py"
        custom_imports = dict(imports=["{fresh.lower()}_hookz"])
    """)
    out = run_tool(os.path.join(ROOT, "tools", "train.py"), project / "configs" / "bad.py",
                   "--fast-dev-run", "--work-dir", tmp_path / "work", cwd=project)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"cannot import '{fresh.lower()}_hookz'" in out.stderr
    assert str(project / "configs") in out.stderr
