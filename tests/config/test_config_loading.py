"""Loading .py/.yaml/.json files, _base_ inheritance, references and package paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from libai.config import Config, ConfigDict
from libai.config import loader as loader_mod
from libai.utils.errors import ConfigError

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(
    "name, text",
    [
        ("c.py", "model = dict(hidden=8, dims=[1, 2])\nlr = 1e-3\n"),
        ("c.yaml", "model:\n  hidden: 8\n  dims: [1, 2]\nlr: 1e-3\n"),
        ("c.yml", "model: {hidden: 8, dims: [1, 2]}\nlr: 0.001\n"),
        ("c.json", '{"model": {"hidden": 8, "dims": [1, 2]}, "lr": 0.001}'),
    ],
)
def test_each_format_loads_the_same_config(write, name, text):
    cfg = Config.fromfile(write(name, text))
    assert cfg.to_dict() == {"model": {"hidden": 8, "dims": [1, 2]}, "lr": 0.001}
    assert isinstance(cfg.lr, float)  # YAML "1e-3" is a float here, not a string
    assert isinstance(cfg.model, ConfigDict)
    assert cfg.filename == str(write(name, text))


def test_python_config_drops_private_names_modules_functions_and_classes(write):
    path = write(
        "c.py",
        """
        import math
        from collections import OrderedDict

        _scale = 2

        def helper(x):
            return x * _scale

        class Local:
            pass

        hidden = helper(16)
        model = dict(type=OrderedDict, act=math.sqrt, local=Local)
        """,
    )
    cfg = Config.fromfile(path)
    assert set(cfg) == {"hidden", "model"}
    assert cfg.hidden == 32
    assert cfg.model.type is __import__("collections").OrderedDict  # nested classes are kept
    assert cfg.model.local.__name__ == "Local"


def test_python_config_sees_its_own_file_name(write):
    path = write("c.py", "import os\nhere = os.path.basename(__file__)\n")
    assert Config.fromfile(path).here == "c.py"


def test_config_from_dict():
    cfg = Config({"a": {"b": 1}})
    assert cfg.a.b == 1 and cfg.filename is None


def test_inheritance_across_levels_and_formats():
    cfg = Config.fromfile(DATA / "inherit" / "leaf.yaml")
    assert cfg.model.to_dict() == {
        "type": "DigitsMLP",  # model.yaml (level 0)
        "hidden": 128,  # mid.py overrides
        "dims": [64, 32],
        "norm": {"type": "LayerNorm"},  # _delete_ replaced the whole dict (no eps)
        "out_features": 64,  # child.py: _base_.model.hidden // 2
        "width": 64,  # leaf.yaml: "{{_base_.model.out_features}}"
    }
    assert cfg.optim_wrapper.optimizer.to_dict() == {"type": "SGD", "lr": 0.01, "momentum": 0.9}
    assert cfg.train_cfg.to_dict() == {
        "type": "IterBasedTrainLoop",
        "max_iters": 200,
        "val_interval": 50,
    }
    assert cfg.warmup == 20
    assert "math" not in cfg and "_base_" not in cfg


def test_later_bases_and_child_override_earlier_ones(write):
    write("a.py", "x = 1\nd = dict(p=1, q=1)\nonly_a = 'a'\n")
    write("b.yaml", "x: 2\nd:\n  q: 2\n  r: 2\n")
    child = write("child.json", '{"_base_": ["a.py", "b.yaml"], "d": {"r": 3}}')
    cfg = Config.fromfile(child)
    assert cfg.to_dict() == {"x": 2, "d": {"p": 1, "q": 2, "r": 3}, "only_a": "a"}


def test_lists_are_replaced_not_merged(write):
    write("base.py", "hooks = [dict(a=1), dict(b=2)]\n")
    cfg = Config.fromfile(write("c.py", "_base_ = 'base.py'\nhooks = [dict(c=3)]\n"))
    assert cfg.hooks == [{"c": 3}]


def test_delete_replaces_inherited_dict_and_is_removed_everywhere(write):
    write("base.yaml", "optim:\n  type: SGD\n  lr: 0.1\n  momentum: 0.9\nkeep: {a: 1}\n")
    path = write(
        "c.py",
        """
        _base_ = ["base.yaml"]
        optim = dict(_delete_=True, type="AdamW", lr=1e-3)
        keep = dict(_delete_=False, b=2)
        fresh = dict(_delete_=True, x=dict(_delete_=True, y=1))
        """,
    )
    cfg = Config.fromfile(path)
    assert cfg.to_dict() == {
        "optim": {"type": "AdamW", "lr": 1e-3},
        "keep": {"a": 1, "b": 2},
        "fresh": {"x": {"y": 1}},
    }


def test_delete_must_be_a_bool(write):
    write("base.py", "optim = dict(lr=1)\n")
    path = write("c.py", "_base_ = 'base.py'\noptim = dict(_delete_='yes', lr=2)\n")
    with pytest.raises(ConfigError, match=r"'optim._delete_' must be True or False, got 'yes'"):
        Config.fromfile(path)


def test_diamond_inheritance_is_not_a_cycle(write):
    write("root.py", "x = 1\n")
    write("left.py", "_base_ = 'root.py'\nl = 1\n")
    write("right.py", "_base_ = 'root.py'\nr = 1\n")
    cfg = Config.fromfile(write("top.py", "_base_ = ['left.py', 'right.py']\n"))
    assert cfg.to_dict() == {"x": 1, "l": 1, "r": 1}


def test_base_cycle_prints_the_chain(write):
    write("a.py", "_base_ = 'b.py'\n")
    write("b.py", "_base_ = ['a.py']\n")
    with pytest.raises(ConfigError, match="circular _base_ inheritance: a.py -> b.py -> a.py"):
        Config.fromfile(write("a.py", "_base_ = 'b.py'\n"))


def test_base_cycle_across_folders_and_formats(write):
    write("sub/b.yaml", "_base_: ../a.py\n")
    a = write("a.py", "_base_ = 'sub/b.yaml'\n")
    with pytest.raises(ConfigError) as info:
        Config.fromfile(a)
    assert f"a.py -> {os.path.join('sub', 'b.yaml')} -> a.py" in str(info.value)


def test_missing_base_names_the_referrer_and_close_files(write):
    write("_base_/schedule_1x.py", "x = 1\n")
    child = write("child.py", "_base_ = ['_base_/schedul_1x.py']\n")
    with pytest.raises(ConfigError) as info:
        Config.fromfile(child)
    msg = str(info.value)
    assert "base config '_base_/schedul_1x.py'" in msg
    assert str(child) in msg
    assert "Did you mean 'schedule_1x.py'?" in msg


def test_missing_base_folder_is_named(write):
    child = write("child.yaml", "_base_: nowhere/x.py\n")
    with pytest.raises(ConfigError, match=r"of '.*child.yaml' not found.*nowhere does not exist"):
        Config.fromfile(child)


def test_missing_top_level_file_suggests_close_names(write):
    path = write("mlp_digits.py", "x = 1\n")
    with pytest.raises(ConfigError, match="config file .* not found.*Did you mean 'mlp_digits.py'"):
        Config.fromfile(path.parent / "mlp_digit.py")


@pytest.mark.parametrize(
    "name, text, pattern",
    [
        ("c.txt", "x=1", r"unsupported config file extension '.txt'.*\.py, \.yaml, \.yml, \.json"),
        ("c.py", "x = (\n", r"syntax error in .*c.py, line 1"),
        ("c.py", "x = 1\ny = 1 / 0\n", r"error in config .*c.py, line 2: ZeroDivisionError"),
        ("c.py", "b = ['x.py']\n_base_ = b\n", r"line 2: _base_ must be a literal"),
        (
            "c.py",
            "if True:\n    _base_ = 'x.py'\n",
            r"line 2: _base_ must be assigned once, at the top",
        ),
        ("c.py", "_base_ = []\n_base_ = []\n", r"_base_ is assigned twice \(lines 1 and 2\)"),
        ("c.py", "_base_ = 3\n", r"_base_ in .*c.py must be a path or a list of paths, got int"),
        ("c.py", "x = _base_.a\n", r"line 1: NameError: name '_base_' is not defined"),
        ("c.yaml", "a: [1, 2\n", r"invalid YAML in .*c.yaml"),
        ("c.yaml", "- 1\n- 2\n", r"must hold a mapping .* got list"),
        ("c.json", '{"a": 1,}', r"invalid JSON in .*c.json, line 1 column 9"),
        (
            "c.yaml",
            "a: '{{_base_.x}}'\n",
            r"'a' refers to \{\{_base_.x\}\} but the file has no _base_",
        ),
    ],
)
def test_malformed_files_raise_config_errors(write, name, text, pattern):
    with pytest.raises(ConfigError, match=pattern):
        Config.fromfile(write(name, text))


def test_python_reference_to_missing_base_key_suggests(write):
    write("base.yaml", "model:\n  hidden: 8\n")
    path = write("c.py", "_base_ = 'base.yaml'\n\nmodel = dict(width=_base_.model.hiden)\n")
    with pytest.raises(ConfigError) as info:
        Config.fromfile(path)
    msg = str(info.value)
    assert "line 3" in msg and "no key 'model.hiden'" in msg and "Did you mean 'hidden'?" in msg


def test_python_base_is_a_copy_for_the_child(write):
    write("base.py", "model = dict(hidden=8, dims=[1])\n")
    path = write(
        "c.py",
        """
        _base_ = 'base.py'
        other = _base_.model
        other.dims.append(2)
        model = dict(hidden=_base_.model.hidden + 1)
        """,
    )
    cfg = Config.fromfile(path)
    # `other` took a copy; the inherited `model.dims` is unchanged.
    assert cfg.model.to_dict() == {"hidden": 9, "dims": [1]}
    assert cfg.other.dims == [1, 2]


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_data_file_references_to_base_values(write, fmt):
    write("base.py", "model = dict(hidden=8, dims=[4, 2], cfg=dict(a=1))\n")
    refs = {
        "copy_int": "{{_base_.model.hidden}}",
        "spaced": "{{ _base_.model.dims.1 }}",
        "whole": "{{_base_.model.cfg}}",
        "text": "prefix {{_base_.model.hidden}}",  # only exact strings are references
        "nested": ["{{_base_.model.dims}}"],
    }
    if fmt == "yaml":
        body = "_base_: base.py\nrefs:\n" + "".join(f"  {k}: {v!r}\n" for k, v in refs.items())
    else:
        import json

        body = json.dumps({"_base_": "base.py", "refs": refs})
    cfg = Config.fromfile(write(f"c.{fmt}", body))
    assert cfg.refs.to_dict() == {
        "copy_int": 8,
        "spaced": 2,
        "whole": {"a": 1},
        "text": "prefix {{_base_.model.hidden}}",
        "nested": [[4, 2]],
    }


def test_data_file_reference_to_missing_key(write):
    write("base.json", '{"model": {"hidden": 8}}')
    path = write("c.yaml", "_base_: base.json\nwidth: '{{_base_.model.hiden}}'\n")
    with pytest.raises(ConfigError) as info:
        Config.fromfile(path)
    msg = str(info.value)
    assert "'width' refers to {{_base_.model.hiden}}" in msg
    assert "no key 'hiden' at 'model'" in msg and "Did you mean 'hidden'?" in msg


# --- libai:: package configs ------------------------------------------------------------------


def test_package_prefix_resolves_in_repo_configs():
    cfg = Config.fromfile("libai::_base_/models/digits_mlp.py")
    assert "model" in cfg
    assert cfg.filename == str(loader_mod.package_config_root() / "_base_/models/digits_mlp.py")


@pytest.fixture
def package_roots(tmp_path, monkeypatch):
    repo, installed = tmp_path / "repo_configs", tmp_path / "site" / "libai" / "configs"
    monkeypatch.setattr(loader_mod, "REPO_CONFIGS", repo)
    monkeypatch.setattr(loader_mod, "PACKAGE_CONFIGS", installed)
    return repo, installed


def test_package_prefix_prefers_repo_then_installed(package_roots, write):
    repo, installed = package_roots
    (installed / "_base_").mkdir(parents=True)
    (installed / "_base_" / "m.py").write_text("where = 'installed'\nmodel = dict(hidden=4)\n")
    user = write("user/c.py", "_base_ = 'libai::_base_/m.py'\nmodel = dict(hidden=8)\n")
    cfg = Config.fromfile(user)
    assert cfg.where == "installed" and cfg.model.hidden == 8
    (repo / "_base_").mkdir(parents=True)
    (repo / "_base_" / "m.py").write_text("where = 'repo'\n")
    assert Config.fromfile(user).where == "repo"
    assert Config.fromfile("libai::_base_/m.py").where == "repo"


def test_package_prefix_missing_file_suggests(package_roots):
    repo, _ = package_roots
    (repo / "_base_").mkdir(parents=True)
    (repo / "_base_" / "adamw.py").write_text("x = 1\n")
    with pytest.raises(
        ConfigError, match="config file 'libai::_base_/adamv.py' not found.*'adamw.py'"
    ):
        Config.fromfile("libai::_base_/adamv.py")


def test_package_prefix_without_any_configs_folder(package_roots):
    with pytest.raises(ConfigError, match="'libai::' configs not found.*reinstall libai"):
        Config.fromfile("libai::x.py")
