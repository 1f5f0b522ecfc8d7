"""Writing configs as Python, YAML or JSON text, and the YAML dialect used for reading.

The Python form is what ``Config.pretty_text`` shows and what ``Config.dump("x.py")`` writes:
one ``name = value`` line per top-level key, dicts as ``dict(...)``, at most 100 columns wide.
Classes and functions (``type=torch.nn.Linear``) are written as dotted-path strings, which the
registry accepts in place of the object.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import yaml

from libai.utils.errors import ConfigError

from .config_dict import is_identifier, join_path

__all__ = ["YamlDumper", "YamlLoader", "json_text", "python_text", "yaml_text"]

# PyYAML follows YAML 1.1, where "1e-3" is a string; configs mean a float. The same rule is
# given to the dumper so that the string "1e-3" is written quoted and reads back as a string.
_FLOAT_EXP = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


class YamlLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also reads ``1e-3`` as a float."""


class YamlDumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` that quotes strings ``YamlLoader`` would read as floats."""


for _cls in (YamlLoader, YamlDumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_EXP, list("-+.0123456789"))


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # PyYAML writes Unicode line breaks raw inside single quotes, and then reads them back as
    # folded spaces; double quotes escape them (\N, \L, \P).
    style = '"' if any(c in data for c in "\x85\u2028\u2029") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


YamlDumper.add_representer(str, _represent_str)


def dotted_name(obj: Any) -> str:
    """``"package.module.Name"`` for a class or function."""
    return f"{obj.__module__}.{obj.__qualname__}"


def _is_named_object(value: Any) -> bool:
    return isinstance(value, type) or (
        callable(value) and hasattr(value, "__module__") and hasattr(value, "__qualname__")
    )


def to_serializable(value: Any, path: str = "", strict: bool = True) -> Any:
    """Plain data for JSON/YAML: dicts, lists (tuples become lists), scalars, dotted names.

    Args:
        value: The value to convert.
        path: Its key path, for error messages. Defaults to "" (the root).
        strict: Raise for values that have no text form; otherwise use ``repr``.
            Defaults to True.

    Raises:
        ConfigError: (strict) A value is neither plain data nor a class/function.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {k: to_serializable(v, join_path(path, k), strict) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_serializable(v, join_path(path, i), strict) for i, v in enumerate(value)]
    if _is_named_object(value):
        return dotted_name(value)
    if strict:
        raise ConfigError(
            f"cannot write '{path or '<root>'}': a {type(value).__name__} ({value!r}) has no "
            "config text form; use plain data, or a class/function (written as its dotted path)"
        )
    return repr(value)


def json_text(cfg: Mapping) -> str:
    """The config as indented JSON."""
    return json.dumps(to_serializable(cfg), indent=2, ensure_ascii=False) + "\n"


def yaml_text(cfg: Mapping) -> str:
    """The config as block-style YAML, keys in config order."""
    return yaml.dump(
        to_serializable(cfg),
        Dumper=YamlDumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=100,
    )


WIDTH = 100  # columns of the Python config text


class _PyWriter:
    """Writes values as Python source. ``dict(...)``/``float(...)`` are avoided when a
    top-level config name shadows the builtin, since later lines would call the config value."""

    def __init__(self, top_keys: set, strict: bool) -> None:
        self.use_dict_call = "dict" not in top_keys
        self.use_float_call = "float" not in top_keys
        self.strict = strict

    def pretty(self, value: Any, path: str, indent: int = 0, room: int = WIDTH) -> str:
        """``value`` as source starting ``indent`` columns in with ``room`` columns left on its
        first line: on one line if it fits, else a dict, list or tuple one item per line (the
        layout yapf gave the same configs; yapf alone cost 0.15 s of every run's start)."""
        text = self.value(value, path)
        if len(text) <= room or not isinstance(value, (Mapping, list, tuple)) or not value:
            return text
        pad = " " * (indent + 4)
        if isinstance(value, Mapping):
            call = self.use_dict_call and all(is_identifier(k) for k in value)
            opening, closing = ("dict(", ")") if call else ("{", "}")
            items = [(f"{k}=" if call else f"{self.value(k, path)}: ", join_path(path, k), v)
                     for k, v in value.items()]
        else:
            opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
            items = [("", join_path(path, i), v) for i, v in enumerate(value)]
        lines = [f"{pad}{prefix}{self.pretty(v, sub, indent + 4, WIDTH - indent - 4 - len(prefix) - 1)},"
                 for prefix, sub, v in items]
        return opening + "\n" + "\n".join(lines) + "\n" + " " * indent + closing

    def value(self, value: Any, path: str) -> str:
        """``value`` as source on one line."""
        if isinstance(value, float):
            return self._float(value)
        if value is None or isinstance(value, (bool, int, str)):
            return repr(value)
        if isinstance(value, Mapping):
            return self._dict(value, path)
        if isinstance(value, list):
            return "[" + ", ".join(self._items(value, path)) + "]"
        if isinstance(value, tuple):
            items = self._items(value, path)
            return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
        if _is_named_object(value):
            return repr(dotted_name(value))
        if self.strict:
            to_serializable(value, path, strict=True)  # raises with the key path
        text = repr(value)
        try:
            ast.parse(text, mode="eval")
        except SyntaxError:
            return repr(text)  # e.g. "<object object at 0x...>": shown as a string
        return text

    def _items(self, values: Any, path: str) -> list[str]:
        return [self.value(v, join_path(path, i)) for i, v in enumerate(values)]

    def _float(self, value: float) -> str:
        if math.isfinite(value):
            return repr(value)
        if math.isnan(value):
            return "float('nan')" if self.use_float_call else "(1e999 - 1e999)"
        sign = "-" if value < 0 else ""
        return f"{sign}float('inf')" if self.use_float_call else f"{sign}1e999"

    def _dict(self, value: Mapping, path: str) -> str:
        if self.use_dict_call and all(is_identifier(k) for k in value):
            parts = [f"{k}={self.value(v, join_path(path, k))}" for k, v in value.items()]
            return "dict(" + ", ".join(parts) + ")"
        parts = [
            f"{self.value(k, path)}: {self.value(v, join_path(path, k))}" for k, v in value.items()
        ]
        return "{" + ", ".join(parts) + "}"


def python_text(cfg: Mapping, strict: bool = False, format_code: bool = True) -> str:
    """The config as a Python config file.

    Args:
        cfg: The config.
        strict: Refuse what would not load back the same: top-level keys that are not Python
            names or start with ``_`` (the loader drops those), and values with no text form.
            Otherwise such keys are written as ``globals()[key] = ...`` and values with
            ``repr``. Defaults to False.
        format_code: Break what does not fit in 100 columns, one item per line. Defaults to
            True.

    Raises:
        ConfigError: (strict) A key or value cannot round-trip through a Python file.
    """
    writer = _PyWriter(set(cfg.keys()), strict)
    lines = []
    for key, value in cfg.items():
        if strict and (not is_identifier(key) or key.startswith("_")):
            raise ConfigError(
                f"cannot write top-level key {key!r} to a Python config: it is not a Python "
                "name (or starts with '_', which the loader drops); dump to .yaml or .json"
            )
        target = f"{key} = " if is_identifier(key) else f"globals()[{key!r}] = "
        if format_code:
            lines.append(target + writer.pretty(value, str(key), 0, WIDTH - len(target)))
        else:
            lines.append(target + writer.value(value, str(key)))
    return "\n".join(lines) + "\n"


