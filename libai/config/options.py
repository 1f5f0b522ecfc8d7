"""Dotted key paths and ``--cfg-options`` overrides.

A key path names a value inside a config: ``optim_wrapper.optimizer.lr``,
``param_scheduler.0.end`` (list index).
Overrides are strict: ``a.b=1`` only replaces a value that exists, so a typo is an error with a
suggestion instead of a silently ignored new key. ``+a.b=1`` adds a key on purpose (and the
dicts leading to it).
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

from .config_dict import ConfigDict, join_path

__all__ = [
    "DictAction",
    "add_cfg_options_argument",
    "get_by_path",
    "parse_options",
    "parse_value",
    "set_by_path",
]


def parse_value(text: str) -> Any:
    """Read a command-line value as a Python literal, or keep it as a string.

    ``"1"`` -> 1, ``"[1, 2]"`` -> [1, 2], ``"None"`` -> None, ``"True"`` -> True, ``"abc"`` ->
    ``"abc"``. Only literals are accepted (``ast.literal_eval``); nothing is executed.
    """
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def _index(node: Sequence, part: str, done: str, full: str) -> int:
    """The list index named by ``part``, or a ConfigError."""
    try:
        idx = int(part)
    except ValueError:
        raise ConfigError(
            f"'{full}': '{done or '<root>'}' is a list, so '{part}' must be an index "
            f"(0 to {len(node) - 1})"
        ) from None
    if not -len(node) <= idx < len(node):
        raise ConfigError(
            f"'{full}': index {idx} is out of range for '{done or '<root>'}', a list of "
            f"{len(node)} item(s)"
        )
    return idx


def _missing(full: str, done: str, part: str, node: Mapping, add_hint: bool) -> ConfigError:
    keys = [str(k) for k in node.keys()]
    msg = f"key '{full}' not found: config has no key '{part}' at '{done or '<root>'}'."
    hint = did_you_mean(part, keys)
    if hint:
        msg += hint
    elif keys:
        msg += " Keys there: " + ", ".join(f"'{k}'" for k in keys[:12]) + "."
    if add_hint:
        msg += f" To add a new key on purpose, write '+{full}=...'."
    return ConfigError(msg)


def _not_container(full: str, done: str, node: Any) -> ConfigError:
    return ConfigError(
        f"'{full}': '{done}' is a {type(node).__name__} ({node!r}), not a dict or list, "
        "so it has no keys"
    )


def get_by_path(cfg: Any, path: str) -> Any:
    """Return the value at the dotted ``path`` (``"a.b"``, ``"hooks.0.type"``).

    Raises:
        ConfigError: A component is missing; the message names the full path, the first
            missing component and the closest existing keys at that level.
    """
    node, done = cfg, ""
    for part in path.split("."):
        if isinstance(node, Mapping):
            if part not in node:
                raise _missing(path, done, part, node, add_hint=False)
            node = node[part]
        elif isinstance(node, (list, tuple)):
            node = node[_index(node, part, done, path)]
        else:
            raise _not_container(path, done, node)
        done = join_path(done, part)
    return node


def set_by_path(cfg: MutableMapping, path: str, value: Any, add: bool = False) -> None:
    """Set the value at the dotted ``path`` in place.

    Args:
        cfg: The config (or any nested mutable mapping).
        path: Dotted key path; integer components index lists.
        value: The new value; it replaces the old one whole (dicts are not merged).
        add: Allow the last key, and missing dicts on the way to it, to be created.
            Defaults to False: every key on the path must already exist.

    Raises:
        ConfigError: The path does not exist (and ``add`` is False), crosses a value that is
            not a dict or list, or the config is frozen.
    """
    if not path or any(not p for p in path.split(".")):
        raise ConfigError(f"invalid key path '{path}': expected names joined by '.'")
    parts = path.split(".")
    _set(cfg, parts, 0, value, add, path)


def _set(node: Any, parts: list[str], i: int, value: Any, add: bool, full: str) -> Any:
    """Set ``parts[i:]`` below ``node``; return ``node`` or, for a tuple, its replacement."""
    done = ".".join(parts[:i])
    part, last = parts[i], i == len(parts) - 1
    if isinstance(node, MutableMapping):
        if part not in node:
            if not add:
                raise _missing(full, done, part, node, add_hint=True)
            if not last:
                node[part] = ConfigDict()
        if last:
            node[part] = value
        else:
            new = _set(node[part], parts, i + 1, value, add, full)
            if new is not node[part]:
                node[part] = new
        return node
    if isinstance(node, (list, tuple)):
        idx = _index(node, part, done, full)
        items = list(node)
        items[idx] = value if last else _set(items[idx], parts, i + 1, value, add, full)
        if isinstance(node, tuple):
            return tuple(items)
        if last or items[idx] is not node[idx]:
            node[idx] = items[idx]
        return node
    raise _not_container(full, done, node)


def parse_options(options: Sequence[str] | Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """Turn ``["a.b=1", "+c=x"]`` (or a dict) into ``[("a.b", 1), ("+c", "x")]``.

    Values of a dict are used as they are; strings of ``KEY=VALUE`` are split at the first
    ``=`` and the value goes through :func:`parse_value`.

    Raises:
        ConfigError: An item has no ``=``.
    """
    if options is None:
        return []
    if isinstance(options, Mapping):
        return [(str(k), v) for k, v in options.items()]
    if isinstance(options, str):
        options = [options]
    out = []
    for item in options:
        key, sep, text = str(item).partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"bad config option '{item}': expected KEY=VALUE, e.g. "
                              f"optim_wrapper.optimizer.lr=0.01")
        out.append((key.strip(), parse_value(text)))
    return out


def apply_options(cfg: MutableMapping, options: Sequence[str] | Mapping[str, Any] | None) -> None:
    """Apply overrides to ``cfg`` in order; see :meth:`libai.config.Config.merge_from_options`."""
    for key, value in parse_options(options):
        add = key.startswith("+")
        path = key[1:] if add else key
        try:
            set_by_path(cfg, path, value, add=add)
        except ConfigError as e:
            raise ConfigError(f"invalid --cfg-options: {e}") from None


class DictAction(argparse.Action):
    """An argparse action that collects ``KEY=VALUE`` words into a dict.

    Values are read with :func:`parse_value`; keys keep a leading ``+``. Repeating the flag
    adds to the same dict. Pass the result to ``Config.merge_from_options``.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        words = [values] if isinstance(values, str) else list(values or [])
        try:
            pairs = parse_options(words)
        except ConfigError as e:
            parser.error(f"{option_string or self.dest}: {e}")
        collected = dict(getattr(namespace, self.dest, None) or {})
        collected.update(pairs)
        setattr(namespace, self.dest, collected)


def add_cfg_options_argument(
    parser: argparse.ArgumentParser, flag: str = "--cfg-options"
) -> argparse.Action:
    """Add ``--cfg-options KEY=VALUE [KEY=VALUE ...]`` to ``parser``.

    The parsed namespace holds a dict (``args.cfg_options``), or None if the flag is absent.

    Args:
        parser: The parser to extend.
        flag: The option name. Defaults to "--cfg-options".

    Returns:
        The argparse action that was added.
    """
    return parser.add_argument(
        flag,
        nargs="+",
        action=DictAction,
        default=None,
        metavar="KEY=VALUE",
        help="override config values, e.g. optim_wrapper.optimizer.lr=0.01 param_scheduler.0.end=50 "
        "train_cfg.max_iters=500 default_hooks.logger.interval=10. "
        "Values are Python literals (else strings). A key that does not exist is an error; "
        "'+key=value' adds a new key.",
    )
