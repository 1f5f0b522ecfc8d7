"""--cfg-options overrides: parsing, strict key paths, explicit additions, argparse helper."""

from __future__ import annotations

import argparse

import pytest

from libai.config import (
    Config,
    DictAction,
    add_cfg_options_argument,
    get_by_path,
    parse_value,
    set_by_path,
)
from libai.utils.errors import ConfigError


def make() -> Config:
    return Config(
        dict(
            a=dict(b=0),
            c=[0],
            d=[dict(x=0), dict(x=1)],
            e=1,
            f=False,
            g="x",
            train_cfg=dict(max_iters=100, val_interval=10),
            t=(dict(k=1), 2),
        )
    )


def test_merge_from_options_parses_literals_and_strings():
    cfg = make()
    cfg.merge_from_options(
        ["a.b=1", "c=[1,2]", "d.0.x=3", "e=None", "f=True", "g=abc", "+new.key=5", "t.0.k=7"]
    )
    assert cfg.a.b == 1
    assert cfg.c == [1, 2]
    assert cfg.d[0].x == 3 and cfg.d[1].x == 1
    assert cfg.e is None and cfg.f is True and cfg.g == "abc"
    assert cfg.new.key == 5
    assert isinstance(cfg.t, tuple) and cfg.t[0].k == 7


@pytest.mark.parametrize(
    "text, value",
    [
        ("1", 1),
        ("-2.5", -2.5),
        ("1e-3", 1e-3),
        ("'quoted'", "quoted"),
        ("abc", "abc"),
        ("a=b", "a=b"),
        ("", ""),
        ("[1, 'a', None]", [1, "a", None]),
        ("(1, 2)", (1, 2)),
        ("{'k': [1]}", {"k": [1]}),
        ("__import__('os').getcwd()", "__import__('os').getcwd()"),  # never evaluated
        ("path/to/file.pth", "path/to/file.pth"),
    ],
)
def test_parse_value(text, value):
    assert parse_value(text) == value and type(parse_value(text)) is type(value)


def test_value_split_at_first_equals_and_dict_values_become_configdicts():
    cfg = make()
    cfg.merge_from_options(["g=x=y", "a={'b': {'c': 1}}"])
    assert cfg.g == "x=y"
    assert cfg.a.b.c == 1  # replaced whole and converted


def test_merge_from_options_accepts_a_dict_with_values_as_given():
    cfg = make()
    cfg.merge_from_options({"a.b": "1", "+added": [1]})
    assert cfg.a.b == "1" and cfg.added == [1]


def test_none_and_empty_options_do_nothing():
    cfg = make()
    cfg.merge_from_options(None)
    cfg.merge_from_options([])
    assert cfg == make()


def test_typo_in_key_names_path_component_and_suggestion():
    cfg = make()
    with pytest.raises(ConfigError) as info:
        cfg.merge_from_options(["train_cfg.max_iter=5"])
    msg = str(info.value)
    assert "--cfg-options" in msg
    assert "'train_cfg.max_iter'" in msg  # the full path
    assert "no key 'max_iter' at 'train_cfg'" in msg  # the first missing component
    assert "Did you mean 'max_iters'" in msg
    assert "'+train_cfg.max_iter=...'" in msg
    assert "max_iter" not in cfg.train_cfg


def test_typo_in_first_component():
    with pytest.raises(
        ConfigError, match=r"no key 'trian_cfg' at '<root>'.*Did you mean 'train_cfg'"
    ):
        make().merge_from_options(["trian_cfg.max_iters=5"])


def test_no_close_key_lists_existing_keys():
    with pytest.raises(ConfigError, match=r"Keys there: 'max_iters', 'val_interval'"):
        make().merge_from_options(["train_cfg.zzzz=1"])


def test_plus_adds_keys_and_intermediate_dicts():
    cfg = make()
    cfg.merge_from_options(["+a.extra.deep=1", "+a.b=2"])
    assert cfg.a.to_dict() == {"b": 2, "extra": {"deep": 1}}


@pytest.mark.parametrize(
    "option, pattern",
    [
        ("d.2.x=1", r"index 2 is out of range for 'd', a list of 2 item\(s\)"),
        ("d.first.x=1", r"'d' is a list, so 'first' must be an index \(0 to 1\)"),
        ("e.x=1", r"'e.x': 'e' is a int \(1\), not a dict or list"),
        ("+e.x=1", r"'e' is a int"),
        ("novalue", r"bad config option 'novalue': expected KEY=VALUE"),
        ("=3", r"expected KEY=VALUE"),
        ("a..b=1", r"invalid key path 'a..b'"),
    ],
)
def test_bad_options(option, pattern):
    with pytest.raises(ConfigError, match=pattern):
        make().merge_from_options([option])


def test_get_and_set_by_path():
    cfg = make()
    assert get_by_path(cfg, "d.1.x") == 1
    set_by_path(cfg, "d.-1.x", 9)
    assert cfg.d[1].x == 9
    with pytest.raises(ConfigError, match=r"no key 'y' at 'd.0'"):
        get_by_path(cfg, "d.0.y")


def test_dict_action_and_add_cfg_options_argument():
    parser = argparse.ArgumentParser()
    add_cfg_options_argument(parser)
    assert parser.parse_args([]).cfg_options is None
    args = parser.parse_args(["--cfg-options", "a.b=1", "g=abc", "--cfg-options", "+n=[1]"])
    assert args.cfg_options == {"a.b": 1, "g": "abc", "+n": [1]}
    cfg = make()
    cfg.merge_from_options(args.cfg_options)
    assert cfg.a.b == 1 and cfg.g == "abc" and cfg.n == [1]


def test_dict_action_rejects_words_without_equals(capsys):
    parser = argparse.ArgumentParser()
    parser.add_argument("--opts", nargs="+", action=DictAction)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--opts", "oops"])
    assert info.value.code == 2
    assert "bad config option 'oops': expected KEY=VALUE" in capsys.readouterr().err
