"""``ConfigDict``: a dict with attribute access that refuses typos and can be made read-only.

It builds on ``addict.Dict`` for attribute access, but a missing key raises
:class:`ConfigKeyError` with a did-you-mean suggestion instead of silently creating an empty
dict. Every nested dict becomes a ``ConfigDict`` when stored, and each one remembers its key
path (``model.backbone``) so that errors can say where they happened.

``freeze()`` makes a whole tree read-only: dicts refuse writes and lists are replaced by
:class:`FrozenList`. A deep copy (``copy()`` / ``copy.deepcopy``) is always mutable again.
"""

from __future__ import annotations

import copy
import keyword
from collections.abc import Iterable, Mapping
from typing import Any

from addict import Dict

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["ConfigDict", "ConfigKeyError", "FrozenList", "to_plain", "join_path"]

# Instance attributes live in the object's __dict__, apart from the keys; these names are
# obscure so that they never shadow a config key under attribute access.
_FROZEN = "_libai_frozen_"
_PATH = "_libai_path_"

_READ_ONLY_HINT = (
    "the config is read-only after validation. Derived values (iterations per epoch, "
    "warmup iterations, scaled LR, ...) must be computed and returned, not written back into "
    "the config; use cfg.copy() for a mutable copy"
)


class ConfigKeyError(ConfigError, KeyError, AttributeError):
    """A key that the config does not have was read.

    It is a ``KeyError`` for ``cfg["x"]`` and an ``AttributeError`` for ``cfg.x`` (so that
    ``hasattr`` and ``getattr(cfg, "x", default)`` keep working).

    Args:
        message: The full message.
        key: The missing key.
        path: Dotted path of the dict that lacks the key; ``""`` for the root.
    """

    def __init__(self, message: str, key: Any = None, path: str = "") -> None:
        super().__init__(message)
        self.key = key
        self.path = path

    def __str__(self) -> str:
        # KeyError would print the message wrapped in quotes.
        return str(self.args[0]) if self.args else ""


def join_path(path: str, key: Any) -> str:
    """Append ``key`` to the dotted ``path`` (``join_path("a", 0) == "a.0"``)."""
    return f"{path}.{key}" if path else str(key)


def missing_key_message(key: Any, path: str, keys: Iterable[Any]) -> str:
    """The message for reading ``key`` from the dict at ``path`` that holds ``keys``."""
    keys = [str(k) for k in keys]
    msg = f"no key '{join_path(path, key)}' in config."
    hint = did_you_mean(str(key), keys)
    if hint:
        return msg + hint
    shown = ", ".join(f"'{k}'" for k in keys[:12]) + (", ..." if len(keys) > 12 else "")
    where = f"'{path}'" if path else "the top level"
    return msg + (f" Keys at {where}: {shown}." if keys else f" The dict at {where} is empty.")


def read_only_error(path: str) -> ConfigError:
    """The error raised when a frozen config at ``path`` is written to."""
    return ConfigError(f"cannot modify '{path or '<root>'}': {_READ_ONLY_HINT}.")


class FrozenList(list):
    """A read-only ``list``: still ``isinstance(x, list)`` and equal to a plain list.

    Every mutating method raises :class:`ConfigError`. ``copy.copy`` and ``copy.deepcopy``
    return plain, mutable lists.
    """

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise read_only_error(vars(self).get(_PATH, ""))

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __copy__(self) -> list:
        return list(self)

    def __deepcopy__(self, memo: dict) -> list:
        return [copy.deepcopy(v, memo) for v in self]

    def __reduce__(self) -> tuple:
        # list's default pickling rebuilds by append(), which a FrozenList refuses.
        return (_rebuild_frozen_list, (list(self), vars(self).get(_PATH, "")))


def _rebuild_frozen_list(items: list, path: str) -> FrozenList:
    out = FrozenList(items)
    vars(out)[_PATH] = path
    return out


def _rebuild_config_dict(cls: type, items: dict, frozen: bool, path: str) -> ConfigDict:
    out = cls(items)
    out._set_path(path)
    if frozen:
        out.freeze()
    return out


class ConfigDict(Dict):
    """A nested config dict with attribute access and strict lookup.

    ``cfg.model.hidden`` and ``cfg["model"]["hidden"]`` are equivalent. Reading a missing
    key raises :class:`ConfigKeyError` with a suggestion (``no key 'modle' in config. Did you
    mean 'model'?``). Keys that collide with dict methods (``items``, ``copy``...) are only
    reachable with ``cfg["items"]``.

    Args:
        *args: A mapping or iterable of pairs, as for ``dict``.
        **kwargs: More keys, as for ``dict``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        object.__setattr__(self, _FROZEN, False)
        object.__setattr__(self, _PATH, "")
        dict.__init__(self)
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    # --- state ----------------------------------------------------------------------------

    @property
    def frozen(self) -> bool:
        """Whether this dict is read-only."""
        return vars(self).get(_FROZEN, False)

    def _set_path(self, path: str) -> None:
        object.__setattr__(self, _PATH, path)

    def _path(self) -> str:
        return vars(self).get(_PATH, "")

    def _check_writable(self, key: Any = None) -> None:
        if self.frozen:
            path = self._path()
            raise read_only_error(join_path(path, key) if key is not None else path)

    def _hook(self, key: Any, value: Any) -> Any:
        """Convert a value being stored: dicts become ConfigDicts, lists are copied."""
        return _convert(value, join_path(self._path(), key))

    # --- reading --------------------------------------------------------------------------

    def __missing__(self, key: Any) -> Any:
        raise ConfigKeyError(missing_key_message(key, self._path(), self.keys()), key, self._path())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            # Protocol probes (copy, pickle, numpy...) must see a plain AttributeError.
            raise AttributeError(name)
        return self[name]

    # --- writing --------------------------------------------------------------------------

    def __setitem__(self, key: Any, value: Any) -> None:
        self._check_writable(key)
        dict.__setitem__(self, key, self._hook(key, value))

    def __setattr__(self, name: str, value: Any) -> None:
        if hasattr(type(self), name):
            raise ConfigError(
                f"'{name}' is a ConfigDict method name; set the key with cfg['{name}'] = ..."
            )
        self[name] = value

    def __delitem__(self, key: Any) -> None:
        self._check_writable(key)
        if key not in self:
            self.__missing__(key)
        dict.__delitem__(self, key)

    def __delattr__(self, name: str) -> None:
        del self[name]

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Merge another mapping in, key by key; nested dicts are merged, not replaced."""
        self._check_writable()
        other = dict(*args, **kwargs)
        for key, value in other.items():
            current = dict.get(self, key)
            if isinstance(current, ConfigDict) and isinstance(value, Mapping):
                current.update(value)
            else:
                self[key] = value

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """Return ``self[key]``, first storing ``default`` there if the key is missing."""
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: Any, *default: Any) -> Any:
        """Remove ``key`` and return its value (or ``default`` if given and the key is missing)."""
        self._check_writable(key)
        if key not in self and not default:
            self.__missing__(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple:
        """Remove and return the last (key, value) pair."""
        self._check_writable()
        return dict.popitem(self)

    def clear(self) -> None:
        """Remove every key."""
        self._check_writable()
        dict.clear(self)

    def __ior__(self, other: Mapping) -> ConfigDict:
        self.update(other)
        return self

    def __or__(self, other: Any) -> Any:
        if not isinstance(other, Mapping):
            return NotImplemented
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other: Any) -> Any:
        if not isinstance(other, Mapping):
            return NotImplemented
        out = ConfigDict(copy.deepcopy(dict(other)))
        out.update(self)
        return out

    # --- freezing and copying --------------------------------------------------------------

    def freeze(self) -> ConfigDict:
        """Make this dict and everything below it read-only, in place.

        Returns:
            ``self``, for chaining.
        """
        object.__setattr__(self, _FROZEN, True)
        for key, value in dict.items(self):
            dict.__setitem__(self, key, _freeze_value(value, join_path(self._path(), key)))
        return self

    def unfreeze(self) -> None:
        """Not supported: a frozen config stays frozen; take a mutable ``copy()`` instead."""
        raise ConfigError("a frozen config cannot be unfrozen; use cfg.copy() for a mutable copy")

    def copy(self) -> ConfigDict:
        """A deep, mutable copy (never frozen, even if this dict is)."""
        return copy.deepcopy(self)

    def deepcopy(self) -> ConfigDict:
        """Same as :meth:`copy`."""
        return copy.deepcopy(self)

    def __copy__(self) -> ConfigDict:
        out = type(self)()
        out._set_path(self._path())
        for key, value in dict.items(self):
            dict.__setitem__(out, key, value)
        return out

    def __deepcopy__(self, memo: dict) -> ConfigDict:
        out = type(self)()
        memo[id(self)] = out
        out._set_path(self._path())
        for key, value in dict.items(self):
            out[copy.deepcopy(key, memo)] = copy.deepcopy(value, memo)
        return out

    def __reduce__(self) -> tuple:
        return (_rebuild_config_dict, (type(self), dict(self), self.frozen, self._path()))

    def to_dict(self) -> dict:
        """Plain ``dict``/``list`` copies of this tree (tuples stay tuples)."""
        return to_plain(self)

    def __repr__(self) -> str:
        return f"ConfigDict({dict.__repr__(self)})"


def _convert(value: Any, path: str) -> Any:
    """Make ``value`` storable in a ConfigDict at ``path``."""
    if isinstance(value, ConfigDict):
        if value._path() != path and not value.frozen:
            _repath(value, path)
        return value
    if isinstance(value, Mapping):
        out = ConfigDict()
        out._set_path(path)
        for key, item in value.items():
            out[key] = item
        return out
    if isinstance(value, list):
        return [_convert(v, join_path(path, i)) for i, v in enumerate(value)]
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_convert(v, join_path(path, i)) for i, v in enumerate(value))
    return value


def _repath(node: ConfigDict, path: str) -> None:
    """Record ``path`` on a ConfigDict moved to a new place, and on the dicts below it."""
    node._set_path(path)
    for key, value in dict.items(node):
        _repath_value(value, join_path(path, key))


def _repath_value(value: Any, path: str) -> None:
    if isinstance(value, ConfigDict):
        _repath(value, path)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _repath_value(v, join_path(path, i))


def _freeze_value(value: Any, path: str) -> Any:
    if isinstance(value, ConfigDict):
        value._set_path(path)
        return value.freeze()
    if isinstance(value, list):
        out = FrozenList(_freeze_value(v, join_path(path, i)) for i, v in enumerate(value))
        vars(out)[_PATH] = path
        return out
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_freeze_value(v, join_path(path, i)) for i, v in enumerate(value))
    return value


def to_plain(value: Any) -> Any:
    """Recursively turn ConfigDicts into ``dict`` and FrozenLists into ``list``."""
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_plain(v) for v in value]
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(to_plain(v) for v in value)
    return value


def is_identifier(key: Any) -> bool:
    """Whether ``key`` can be written as a Python keyword argument / variable name."""
    return (
        isinstance(key, str)
        and key.isidentifier()
        and not keyword.iskeyword(key)
        and key != "__debug__"
    )
