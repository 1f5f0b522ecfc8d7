"""Name the configured value a constructor rejected: ``optim_wrapper.optimizer.lr='fast'``.

A constructor (or torch below it) that rejects a value says so in its own words, often without
the argument's name (``'<=' not supported between 'float' and 'str'``). The signature says more:
an argument whose value is not of the kind its annotation or its default has is the likely
culprit, and the message then names its config path, the kind expected and the default.

Two entry points, both used by :func:`~libai.registry.build_from_cfg`:

- :func:`check_annotated_kinds` refuses, before the call, a value that contradicts a plain
  annotation (``lr: float = 1e-3`` given ``'fast'``). Only annotations made of ``int``, ``float``,
  ``bool``, ``str`` and ``None`` are read; anything richer is left to the constructor.
- :func:`explain_failure` turns an exception from the call into a :class:`BuildError` naming the
  likely argument, or, for the exception types a bad value causes, naming the config path. Other
  exceptions (``AttributeError``, ``NameError`` ... with no suspicious argument) are bugs and keep
  their traceback.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

from libai.utils.errors import BuildError, LibaiError

__all__ = ["check_annotated_kinds", "explain_failure", "USER_ERRORS"]

# What a constructor raises when a configured value is wrong (torch raises RuntimeError for bad
# sizes, OSError covers missing files and permissions, ImportError a missing optional package).
USER_ERRORS = (TypeError, ValueError, RuntimeError, OSError, LookupError, ImportError,
               OverflowError, LibaiError)

_SCALARS = {"int": int, "float": float, "bool": bool, "str": str, "None": type(None)}
_KIND_TEXT = {int: "a whole number", float: "a number", bool: "True or False", str: "a string",
              type(None): "None"}


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (list, tuple)):
        return "sequence"
    if isinstance(value, Mapping):
        return "dict"
    return "none" if value is None else "other"


_EXPECT = {"number": "a number", "bool": "True or False", "str": "a string",
           "sequence": "a list", "dict": "a dict"}


def _parameters(obj_cls: Any) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(obj_cls).parameters
    except (TypeError, ValueError):
        return {}


def _plain_types(annotation: Any) -> tuple[type, ...] | None:
    """``'int | None'`` -> (int, NoneType); None when the annotation is anything richer."""
    if isinstance(annotation, type) and annotation in _SCALARS.values():
        return (annotation,)
    if not isinstance(annotation, str):
        return None
    names = [part.strip() for part in annotation.split("|")]
    if not all(name in _SCALARS for name in names):
        return None
    return tuple(_SCALARS[name] for name in names)


def _matches(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    if isinstance(value, int) and (int in types or float in types):
        return True
    return any(t is not bool and isinstance(value, t) for t in types)


def _owner(obj_cls: Any) -> str:
    return getattr(obj_cls, "__name__", None) or type(obj_cls).__name__


def _default_text(obj_cls: Any, param: inspect.Parameter) -> str:
    if param.default is param.empty:
        return ""
    return f" ({_owner(obj_cls)}'s default is {param.default!r})"


def check_annotated_kinds(obj_cls: Any, args: Mapping[str, Any], path: str) -> None:
    """Refuse an argument whose value contradicts a plain scalar annotation.

    Raises:
        BuildError: ``<path>.<arg>=<value>: expected <kind> (<Class>'s default is ...)``.
    """
    params = _parameters(obj_cls)
    for name, value in args.items():
        param = params.get(name)
        types = None if param is None else _plain_types(param.annotation)
        if types is None or _matches(value, types):
            continue
        if param.default is not param.empty and param.default is value:
            continue
        wanted = " or ".join(_KIND_TEXT[t] for t in types)
        raise BuildError(f"{path}.{name}={value!r}: expected {wanted}"
                         f"{_default_text(obj_cls, param)}.")


def _negative(obj_cls: Any, args: Mapping[str, Any]) -> str | None:
    """The argument most likely wrong when a constructor fails and some values are negative or
    not finite: the first such one whose default is >= 0, else the only such one."""
    params = _parameters(obj_cls)
    negative = [n for n, v in args.items() if _kind(v) == "number" and not 0 <= v < math.inf]
    for name in negative:
        param = params.get(name)
        default = None if param is None else param.default
        if _kind(default) == "number" and default >= 0:
            return name
    return negative[0] if len(negative) == 1 else None


def _suspect(obj_cls: Any, args: Mapping[str, Any]) -> tuple[str, inspect.Parameter] | None:
    """The first argument whose value is not of its default's kind, if any."""
    params = _parameters(obj_cls)
    for name, value in args.items():
        param = params.get(name)
        if param is None or param.default is param.empty or param.default is None:
            continue
        want, got = _kind(param.default), _kind(value)
        if got == "other" or (want == "number" and got == "bool"):  # objects: cannot tell
            continue
        if want in _EXPECT and got != want:
            return name, param
        if want == "sequence" and got == want and len(value) != len(param.default):
            return name, param
    return None


def explain_failure(error: Exception, obj_cls: Any, args: Mapping[str, Any],
                    path: str) -> BuildError | None:
    """A BuildError for ``error`` raised by ``obj_cls(**args)``, or None when it looks like a bug.

    Args:
        error: What the constructor raised.
        obj_cls: The class or function called.
        args: The arguments it was called with.
        path: The config path of the dict it was built from.
    """
    said = f"{type(error).__name__}: {error}"
    suspect = _suspect(obj_cls, args)
    if isinstance(error, LibaiError):  # its message already says what is expected
        name = _negative(obj_cls, args) or (suspect[0] if suspect else None)
        if name is None:
            return BuildError(f"Building '{path}' ({_owner(obj_cls)}) failed: {said}")
        return BuildError(f"{path}.{name}={args[name]!r}: {error}")
    if suspect is not None:
        name, param = suspect
        expected = _EXPECT[_kind(param.default)]
        if expected == "a list" and isinstance(args[name], (list, tuple)):
            expected = f"a list of {len(param.default)} values"
        return BuildError(f"{path}.{name}={args[name]!r}: expected {expected}"
                          f"{_default_text(obj_cls, param)}. {_owner(obj_cls)} raised {said}")
    negative = _negative(obj_cls, args)
    if negative is not None and isinstance(error, USER_ERRORS):
        param = _parameters(obj_cls).get(negative)
        default = "" if param is None else _default_text(obj_cls, param)
        return BuildError(f"{path}.{negative}={args[negative]!r}: expected a finite number >= 0"
                          f"{default}. {_owner(obj_cls)} raised {said}")
    if isinstance(error, USER_ERRORS):
        return BuildError(f"Building '{path}' ({_owner(obj_cls)}) failed: {said}")
    return None
