"""Dumping to .py/.yaml/.json, pretty_text, and diffs."""

from __future__ import annotations

import collections
import keyword
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libai.config import MISSING, Config
from libai.utils.errors import ConfigError

FORMATS = [".py", ".yaml", ".yml", ".json"]


def sample() -> Config:
    return Config(
        dict(
            model=dict(type="MLP", hidden=32, dims=[64, 32], act=None, bias=True, scale=0.5),
            optim_wrapper=dict(optimizer=dict(type="AdamW", lr=1e-3, betas=[0.9, 0.999])),
            hooks=[dict(type="LoggerHook", interval=10), dict(type="CheckpointHook")],
            custom_keys={"norm.weight": dict(decay_mult=0.0), "class": 1, 3: "int key"},
            name="run 'one'\n",
            empty=dict(),
        )
    )


def typed(value):
    """A form where 1, 1.0 and True differ, so round trips must keep the types."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    return (type(value).__name__, value)


@pytest.mark.parametrize("suffix", [".py", ".yaml", ".yml"])
def test_dump_round_trip(tmp_path, suffix):
    cfg = sample()
    path = tmp_path / f"out{suffix}"
    cfg.dump(path)
    back = Config.fromfile(path)
    assert typed(back.to_dict()) == typed(cfg.to_dict())


def test_dump_round_trip_json(tmp_path):
    cfg = sample()
    del cfg.custom_keys[3]  # JSON keys are always strings
    cfg.dump(tmp_path / "out.json")
    assert typed(Config.fromfile(tmp_path / "out.json").to_dict()) == typed(cfg.to_dict())


def test_dump_of_a_merged_config_round_trips(tmp_path, write):
    write("base.yaml", "model:\n  hidden: 8\n  norm: {type: BN}\n")
    child = write(
        "c.py", "_base_ = 'base.yaml'\nmodel = dict(norm=dict(_delete_=True, type='LN'))\n"
    )
    cfg = Config.fromfile(child)
    for suffix in FORMATS:
        cfg.dump(tmp_path / "dump" / f"c{suffix}")
        assert Config.fromfile(tmp_path / "dump" / f"c{suffix}") == cfg


def test_dump_py_writes_dict_calls_and_dotted_names(tmp_path):
    cfg = Config(dict(model=dict(type=collections.OrderedDict, fn=math.sqrt, size=(1,), t=(1, 2))))
    cfg.dump(tmp_path / "c.py")
    text = (tmp_path / "c.py").read_text()
    assert "model = dict(" in text
    assert "type='collections.OrderedDict'" in text
    assert "fn='math.sqrt'" in text
    back = Config.fromfile(tmp_path / "c.py")
    assert back.model.type == "collections.OrderedDict"
    assert back.model.size == (1,) and back.model.t == (1, 2)


def test_tuples_and_classes_in_yaml_and_json(tmp_path):
    cfg = Config(dict(t=(1, 2), k=collections.OrderedDict))
    for suffix in (".yaml", ".json"):
        cfg.dump(tmp_path / f"c{suffix}")
        assert Config.fromfile(tmp_path / f"c{suffix}").to_dict() == {
            "t": [1, 2],
            "k": "collections.OrderedDict",
        }


def test_non_finite_floats_round_trip(tmp_path):
    cfg = Config(dict(a=float("inf"), b=-float("inf"), c=float("nan")))
    for suffix in FORMATS:
        cfg.dump(tmp_path / f"c{suffix}")
        back = Config.fromfile(tmp_path / f"c{suffix}")
        assert back.a == math.inf and back.b == -math.inf and math.isnan(back.c)


def test_python_dump_when_keys_shadow_builtins(tmp_path):
    cfg = Config({"dict": dict(a=1), "float": float("inf"), "x": dict(b=float("nan"))})
    cfg.dump(tmp_path / "c.py")
    back = Config.fromfile(tmp_path / "c.py")
    assert back.dict == {"a": 1} and back.float == math.inf and math.isnan(back.x.b)


def test_pretty_text_is_formatted_python():
    text = sample().pretty_text
    assert text.startswith("model = dict(")
    assert "custom_keys = {" in text
    assert all(len(line) <= 100 for line in text.splitlines())
    compile(text, "<pretty_text>", "exec")


@pytest.mark.parametrize(
    "cfg, suffix, pattern",
    [
        ({"a-b": 1}, ".py", r"top-level key 'a-b' .* not a Python name.*\.yaml or \.json"),
        ({"_hidden": 1}, ".py", r"top-level key '_hidden'"),
        ({"a": {"b": object()}}, ".py", r"cannot write 'a.b': a object"),
        ({"a": [{"b": object()}]}, ".json", r"cannot write 'a.0.b'"),
        ({"a": 1}, ".toml", r"unknown extension '.toml'; use .py, .yaml, .yml or .json"),
    ],
)
def test_dump_errors(tmp_path, cfg, suffix, pattern):
    with pytest.raises(ConfigError, match=pattern):
        Config(cfg).dump(tmp_path / f"c{suffix}")


def test_pretty_text_shows_what_dump_refuses():
    text = Config({"a-b": 1, "o": object()}).pretty_text
    assert "globals()['a-b'] = 1" in text and "o = '<object object" in text
    compile(text, "<pretty_text>", "exec")


def test_diff_lists_added_removed_and_changed_paths():
    old = sample()
    new = sample()
    new.model.hidden = 64
    new.model.bias = 1  # True -> 1 is a change although True == 1
    del new.model.act
    new.model.dropout = 0.1
    new.hooks[1].interval = 5
    new.optim_wrapper.optimizer.betas = [0.9, 0.99, 0.1]
    changes = old.diff(new)
    assert changes == [
        ("model.hidden", 32, 64),
        ("model.act", None, MISSING),
        ("model.bias", True, 1),
        ("model.dropout", MISSING, 0.1),
        ("optim_wrapper.optimizer.betas", [0.9, 0.999], [0.9, 0.99, 0.1]),
        ("hooks.1.interval", MISSING, 5),
    ]
    assert old.diff(sample()) == []
    assert old.freeze().diff(sample()) == []  # a frozen list equals a plain one


def test_diff_text_is_readable():
    old, new = sample(), sample()
    new.model.hidden = 64
    new.model.dropout = 0.1
    del new.name
    text = old.diff_text(new)
    lines = text.splitlines()
    assert lines[0] == "3 difference(s) from this config to other:"
    assert "  ~ model.hidden: 32 -> 64" in lines
    assert "  + model.dropout: 0.1  (added)" in lines
    assert "  - name: \"run 'one'\\n\"  (removed)" in lines
    assert old.diff_text(sample()) == "no differences between this config and other"


def test_diff_text_names_files(tmp_path, write):
    a = Config.fromfile(write("a.py", "x = 1\n"))
    b = Config.fromfile(write("b.py", "x = 2\n"))
    assert a.diff_text(b).splitlines()[0] == f"1 difference(s) from {a.filename} to {b.filename}:"


# --- property test: random configs survive dump and load ----------------------------------------

_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True).filter(
    lambda k: k != "_delete_"  # reserved by _base_ merging
)
# Top-level names must be Python variable names the loader keeps.
_TOP = _NAME.filter(lambda k: not k.startswith("_") and not keyword.iskeyword(k))
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_NAME, inner, max_size=4),
    max_leaves=12,
)
_CONFIGS = st.dictionaries(_TOP, _VALUES, max_size=5)


@pytest.mark.parametrize("suffix", [".py", ".json", ".yaml"])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=_CONFIGS)
def test_random_configs_round_trip(tmp_path, suffix, data):
    path = tmp_path / f"random{suffix}"
    Config(data).dump(path)
    assert typed(Config.fromfile(path).to_dict()) == typed(data)


@pytest.mark.parametrize("text", ["\x85", "a\u2028b", "\u2029", "1e3", "null", "héllo", "a\nb"])
def test_yaml_keeps_awkward_strings(tmp_path, text):
    Config({"s": text}).dump(tmp_path / "c.yaml")
    assert Config.fromfile(tmp_path / "c.yaml").s == text


def test_diff_text_shows_plain_values_and_shortens_long_ones():
    old = Config(dict(hooks=[dict(type="A", interval=1)], big=list(range(100))))
    new = Config(dict(big=[1]))
    text = old.diff_text(new)
    assert "  - hooks: [{'type': 'A', 'interval': 1}]  (removed)" in text
    assert "ConfigDict" not in text
    big = next(line for line in text.splitlines() if "big" in line)
    assert "..." in big and len(big) < 200
