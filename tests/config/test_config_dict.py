"""ConfigDict / Config access, strict lookup, freezing and copying."""

from __future__ import annotations

import copy
import pickle

import pytest

from libai.config import Config, ConfigDict, ConfigKeyError, FrozenList
from libai.utils.errors import ConfigError


def make() -> Config:
    return Config(
        dict(
            model=dict(type="MLP", hidden=32, dims=[64, 32], blocks=[dict(kind="a")]),
            train_cfg=dict(max_iters=100, val_interval=10),
            pair=(1, [2, 3]),
        )
    )


def test_item_and_attribute_access():
    cfg = make()
    assert cfg.model.hidden == 32
    assert cfg["model"]["hidden"] == 32
    assert cfg.model["dims"] == [64, 32]
    assert isinstance(cfg.model, ConfigDict)
    assert isinstance(cfg.model.blocks[0], ConfigDict)
    assert cfg.model.blocks[0].kind == "a"
    assert "model" in cfg and "modle" not in cfg
    assert len(cfg) == 3 and list(cfg) == ["model", "train_cfg", "pair"]
    assert cfg.get("missing", 5) == 5
    assert cfg.filename is None


def test_missing_attribute_suggests_close_key():
    cfg = make()
    with pytest.raises(AttributeError) as info:
        cfg.modle  # noqa: B018
    assert isinstance(info.value, ConfigError)
    assert "no key 'modle' in config" in str(info.value)
    assert "Did you mean 'model'?" in str(info.value)


def test_missing_item_is_key_error_with_path_and_suggestion():
    cfg = make()
    with pytest.raises(KeyError) as info:
        cfg["train_cfg"]["max_iter"]
    msg = str(info.value)
    assert "no key 'train_cfg.max_iter'" in msg
    assert "'max_iters'" in msg
    assert not msg.startswith('"')  # not KeyError's quoted repr
    assert isinstance(info.value, ConfigKeyError) and info.value.key == "max_iter"


def test_missing_key_without_suggestion_lists_keys():
    cfg = make()
    with pytest.raises(ConfigKeyError, match="Keys at 'train_cfg': 'max_iters', 'val_interval'"):
        cfg.train_cfg.zzzzzz  # noqa: B018


def test_no_auto_vivification():
    d = ConfigDict()
    with pytest.raises(AttributeError, match="no key 'a'"):
        d.a.b = 1
    assert d == {}
    assert not hasattr(d, "a")
    assert getattr(d, "a", None) is None


def test_nested_dicts_and_lists_are_converted_on_assignment():
    cfg = make()
    cfg.extra = {"inner": {"x": 1}, "items": [{"y": 2}]}
    assert cfg.extra.inner.x == 1
    assert cfg.extra["items"][0].y == 2
    with pytest.raises(KeyError, match="no key 'extra.inner.z'"):
        cfg.extra.inner.z  # noqa: B018


def test_method_names_cannot_be_set_as_attributes():
    d = ConfigDict()
    with pytest.raises(ConfigError, match=r"cfg\['items'\]"):
        d.items = 1
    d["items"] = 1
    assert d["items"] == 1
    with pytest.raises(ConfigError, match=r"Config attribute.*cfg\['filename'\]"):
        make().filename = "x"


def test_to_dict_returns_plain_containers():
    cfg = make().freeze()
    out = cfg.to_dict()
    assert type(out) is dict and type(out["model"]) is dict
    assert type(out["model"]["dims"]) is list
    assert type(out["model"]["blocks"][0]) is dict
    assert out["pair"] == (1, [2, 3]) and type(out["pair"][1]) is list
    out["model"]["dims"].append(1)  # a copy: the frozen config is untouched
    assert cfg.model.dims == [64, 32]


READ_ONLY_WORDS = ("read-only after validation", "Derived values", "scaled LR", "returned")


@pytest.mark.parametrize(
    "attempt",
    [
        lambda c: setattr(c.model, "hidden", 1),
        lambda c: c.model.__setitem__("hidden", 1),
        lambda c: delattr(c.model, "hidden"),
        lambda c: c.model.__delitem__("hidden"),
        lambda c: c.model.update(hidden=1),
        lambda c: c.model.pop("hidden"),
        lambda c: c.model.setdefault("new", 1),
        lambda c: c.model.clear(),
        lambda c: setattr(c, "new", 1),
        lambda c: c.__setitem__("model", {}),
        lambda c: c.merge_from_options(["model.hidden=3"]),
    ],
)
def test_frozen_config_refuses_dict_writes(attempt):
    cfg = make().freeze()
    with pytest.raises(ConfigError) as info:
        attempt(cfg)
    for word in READ_ONLY_WORDS:
        assert word in str(info.value)
    assert cfg.model.hidden == 32


@pytest.mark.parametrize(
    "mutate",
    [
        lambda xs: xs.append(1),
        lambda xs: xs.extend([1]),
        lambda xs: xs.insert(0, 1),
        lambda xs: xs.pop(),
        lambda xs: xs.remove(64),
        lambda xs: xs.clear(),
        lambda xs: xs.sort(),
        lambda xs: xs.reverse(),
        lambda xs: xs.__setitem__(0, 1),
        lambda xs: xs.__delitem__(0),
        lambda xs: xs.__iadd__([1]),
        lambda xs: xs.__imul__(2),
    ],
)
def test_frozen_lists_refuse_mutation(mutate):
    cfg = make().freeze()
    dims = cfg.model.dims
    assert isinstance(dims, list) and isinstance(dims, FrozenList)
    assert dims == [64, 32] and [64, 32] == dims
    with pytest.raises(ConfigError, match="cannot modify 'model.dims'.*read-only"):
        mutate(dims)
    assert dims == [64, 32]


def test_freeze_reaches_dicts_inside_lists_and_tuples():
    cfg = make().freeze()
    assert cfg.frozen and cfg.model.frozen
    with pytest.raises(ConfigError, match="'model.blocks.0.kind'"):
        cfg.model.blocks[0].kind = "b"
    with pytest.raises(ConfigError, match="read-only"):
        cfg.pair[1].append(4)
    assert isinstance(cfg.pair, tuple)


@pytest.mark.parametrize("how", ["copy", "deepcopy", "copy.copy"])
def test_copies_of_a_frozen_config_are_mutable(how):
    cfg = make().freeze()
    other = {
        "copy": cfg.copy,
        "deepcopy": lambda: copy.deepcopy(cfg),
        "copy.copy": lambda: copy.copy(cfg),
    }[how]()
    assert not other.frozen and other == cfg
    other.model.hidden = 1
    other.model.dims.append(16)
    other.model.blocks[0].kind = "b"
    assert type(other.model.dims) is list
    assert cfg.model.hidden == 32 and cfg.model.dims == [64, 32] and cfg.model.blocks[0].kind == "a"


def test_configdict_copy_is_deep_and_unfrozen():
    d = ConfigDict(a=dict(b=[1])).freeze()
    c = d.copy()
    c.a.b.append(2)
    assert d.a.b == [1] and c.a.b == [1, 2] and not c.frozen
    with pytest.raises(ConfigError, match="cfg.copy"):
        d.unfreeze()


def test_config_init_copies_containers():
    src = {"a": {"b": [1]}}
    cfg = Config(src)
    cfg.a.b.append(2)
    assert src == {"a": {"b": [1]}}
    frozen = make().freeze()
    thawed = Config(frozen)
    thawed.model.hidden = 5
    assert frozen.model.hidden == 32


def test_pickle_keeps_values_and_frozen_state():
    cfg = make().freeze()
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and back.frozen
    assert isinstance(back.model.dims, FrozenList)
    with pytest.raises(ConfigError, match="read-only"):
        back.model.dims.append(1)
    plain = pickle.loads(pickle.dumps(make()))
    plain.model.dims.append(1)
    assert plain.model.dims == [64, 32, 1]


def test_equality_with_plain_dicts():
    cfg = make()
    assert cfg == cfg.to_dict()
    assert cfg.model == cfg.to_dict()["model"]
    assert cfg != {"model": 1}


def test_recursive_update_and_or():
    d = ConfigDict(a=dict(x=1, y=2))
    d.update(a=dict(y=3))
    assert d == {"a": {"x": 1, "y": 3}}
    merged = d | {"a": {"z": 4}}
    assert isinstance(merged, ConfigDict) and merged.a == {"x": 1, "y": 3, "z": 4}
    assert d.a == {"x": 1, "y": 3}
