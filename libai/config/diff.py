"""Key-by-key differences between two configs (for example, a resumed run's saved config)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .config_dict import join_path, to_plain

__all__ = ["MISSING", "diff", "diff_text"]


class _Missing:
    """Marks a side of a difference where the key does not exist."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<missing>"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING = _Missing()


def diff(old: Any, new: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """List the differences from ``old`` to ``new`` as ``(dotted_path, old, new)``.

    Dicts are compared key by key (old key order first, then keys only ``new`` has). Lists and
    tuples of the same length are compared item by item (paths like ``hooks.0.interval``);
    otherwise they differ as a whole. A key on one side only has :data:`MISSING` on the other.

    Args:
        old: The reference config (or any value).
        new: The config compared with it.
        path: Path prefix for the entries. Defaults to "".
    """
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out = []
        for key, value in old.items():
            sub = join_path(path, key)
            if key in new:
                out += diff(value, new[key], sub)
            else:
                out.append((sub, value, MISSING))
        out += [(join_path(path, k), MISSING, v) for k, v in new.items() if k not in old]
        return out
    if _sequences(old, new) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out += diff(a, b, join_path(path, i))
        return out
    return [(path, old, new)] if _differs(old, new) else []


def _sequences(a: Any, b: Any) -> bool:
    """Both lists (FrozenList counts as list) or both tuples."""
    return (isinstance(a, list) and isinstance(b, list)) or (
        isinstance(a, tuple) and isinstance(b, tuple)
    )


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return False
    if _sequences(a, b):
        return a != b
    # 1, 1.0 and True compare equal in Python, but a config that changes one into another
    # changed.
    return type(a) is not type(b) or a != b


def _short(value: Any, limit: int = 80) -> str:
    text = repr(to_plain(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def diff_text(old: Any, new: Any, old_name: str = "old", new_name: str = "new") -> str:
    """A readable, line-per-key report of :func:`diff`.

    Lines read ``+ key: value`` (added), ``- key: value`` (removed) and
    ``~ key: old -> new`` (changed).

    Args:
        old: The reference config.
        new: The config compared with it.
        old_name: What to call ``old`` in the header. Defaults to "old".
        new_name: What to call ``new`` in the header. Defaults to "new".
    """
    changes = diff(old, new)
    if not changes:
        return f"no differences between {old_name} and {new_name}"
    lines = [f"{len(changes)} difference(s) from {old_name} to {new_name}:"]
    for path, a, b in changes:
        key = path or "<root>"
        if a is MISSING:
            lines.append(f"  + {key}: {_short(b)}  (added)")
        elif b is MISSING:
            lines.append(f"  - {key}: {_short(a)}  (removed)")
        else:
            lines.append(f"  ~ {key}: {_short(a)} -> {_short(b)}")
    return "\n".join(lines)
