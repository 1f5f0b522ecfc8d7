"""Reading config files: formats, ``_base_`` inheritance and references to base values.

``load_file(path)`` returns the fully merged :class:`ConfigDict` of one file:

1. Its ``_base_`` files (a path or a list, relative to the file, or ``libai::...`` inside the
   package) are loaded recursively and merged in order, later ones winning.
2. The file's own values are merged on top: dicts key by key, everything else replaced; a dict
   with ``_delete_=True`` replaces the inherited dict instead of merging into it.

In a Python file the name ``_base_`` is bound to the merged bases while the file runs, so
``hidden=_base_.model.hidden * 2`` works. In YAML/JSON, a string that is exactly
``"{{_base_.model.hidden}}"`` is replaced by that base value.
"""

from __future__ import annotations

import ast
import builtins
import copy
import json
import os
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

from .config_dict import ConfigDict, join_path
from .formats import YamlLoader
from .options import get_by_path

__all__ = ["PACKAGE_PREFIX", "SUFFIXES", "load_file", "merge", "package_config_root", "resolve"]

PACKAGE_PREFIX = "libai::"
SUFFIXES = (".py", ".yaml", ".yml", ".json")
BASE_KEY = "_base_"
DELETE_KEY = "_delete_"
_BASE_VAR = "__libai_merged_base__"
_REFERENCE = re.compile(r"^\{\{\s*_base_\.([^{}\s]+)\s*\}\}$")


def _find_repo_configs() -> Path | None:
    # A source checkout or editable install: <repo>/libai/config/loader.py -> <repo>/configs.
    repo = Path(__file__).resolve().parents[2]
    if (repo / "setup.py").is_file() or (repo / "pyproject.toml").is_file():
        return repo / "configs"
    return None


# Where ``libai::`` paths point; module attributes so that tests can redirect them.
REPO_CONFIGS: Path | None = _find_repo_configs()
PACKAGE_CONFIGS: Path = Path(__file__).resolve().parents[1] / "configs"  # setup.py ships it


def package_config_root() -> Path:
    """The folder ``libai::`` paths are relative to.

    ``<repo>/configs`` in a source checkout or editable install, else the ``libai/configs``
    folder that a regular install ships.

    Raises:
        ConfigError: Neither folder exists.
    """
    for root in (REPO_CONFIGS, PACKAGE_CONFIGS):
        if root is not None and root.is_dir():
            return root
    raise ConfigError(
        f"'{PACKAGE_PREFIX}' configs not found: neither {REPO_CONFIGS} nor {PACKAGE_CONFIGS} "
        "exists; reinstall libai"
    )


def resolve(ref: str | os.PathLike, referrer: Path | None = None) -> Path:
    """Turn a config reference into an absolute path; the file must exist.

    Args:
        ref: A path, relative to the referring file's folder (or to the working directory), or
            ``"libai::<path>"`` inside the package configs.
        referrer: The file whose ``_base_`` names ``ref``. Defaults to None (a top-level file).

    Raises:
        ConfigError: The file does not exist; the message names the referring file and close
            file names in the folder where it was looked for.
    """
    text = os.fspath(ref)
    if text.startswith(PACKAGE_PREFIX):
        path = package_config_root() / text[len(PACKAGE_PREFIX) :]
    else:
        path = Path(os.path.expanduser(text))
        if not path.is_absolute() and referrer is not None:
            path = referrer.parent / path
    path = Path(os.path.abspath(path))
    if path.is_file():
        return path
    what = f"base config '{text}' of '{referrer}'" if referrer else f"config file '{text}'"
    msg = f"{what} not found (looked for {path})."
    if path.parent.is_dir():
        names = [p.name for p in path.parent.iterdir() if p.suffix in SUFFIXES or p.is_dir()]
        msg += did_you_mean(path.name, sorted(names))
    else:
        msg += f" Folder {path.parent} does not exist."
    raise ConfigError(msg)


def _display(path: Path, start: Path) -> str:
    try:
        return os.path.relpath(path, start)
    except ValueError:  # another drive on Windows
        return str(path)


def load_file(path: Path, _chain: tuple[Path, ...] = ()) -> ConfigDict:
    """Load one config file (resolved, absolute) with all of its bases merged.

    Raises:
        ConfigError: Bad syntax, an unknown extension, a missing or circular base, or an error
            while the Python file runs.
    """
    if path in _chain:
        names = [_display(p, _chain[0].parent) for p in (*_chain, path)]
        raise ConfigError("circular _base_ inheritance: " + " -> ".join(names))
    chain = (*_chain, path)
    if path.suffix == ".py":
        return _load_python(path, chain)
    if path.suffix in (".yaml", ".yml", ".json"):
        data = _read_data_file(path)
        base = _load_bases(data.pop(BASE_KEY, None), path, chain)
        data = _substitute(data, base, path, "")
        return merge(base, data)
    raise ConfigError(
        f"unsupported config file extension '{path.suffix}' for {path}; "
        f"use one of {', '.join(SUFFIXES)}"
    )


def _load_bases(refs: Any, path: Path, chain: tuple[Path, ...]) -> ConfigDict | None:
    """Load and merge the files named by a ``_base_`` value; None if there is none."""
    if refs is None:
        return None
    if isinstance(refs, str):
        refs = [refs]
    if not isinstance(refs, (list, tuple)) or not all(isinstance(r, str) for r in refs):
        raise ConfigError(
            f"_base_ in {path} must be a path or a list of paths, got {type(refs).__name__}: "
            f"{refs!r}"
        )
    merged = ConfigDict()
    for ref in refs:
        merged = merge(merged, load_file(resolve(ref, path), chain))
    return merged


def merge(base: Mapping | None, child: Mapping, path: str = "") -> ConfigDict:
    """Merge ``child`` onto a copy of ``base``; neither is modified.

    Dicts merge key by key. Any other value (lists included) replaces the base value. A child
    dict with ``_delete_=True`` replaces the base dict. ``_delete_`` keys never reach the result.

    Args:
        base: The inherited values, or None.
        child: The values that win.
        path: Key path of these dicts, for error messages. Defaults to "" (the root).
    """
    out = ConfigDict(copy.deepcopy(dict(base))) if base else ConfigDict()
    for key, value in child.items():
        if key == DELETE_KEY:
            continue
        sub = join_path(path, key)
        current = dict.get(out, key)
        if isinstance(value, Mapping) and isinstance(current, Mapping) and not _deletes(value, sub):
            out[key] = merge(current, value, sub)
        else:
            out[key] = _strip_delete(value, sub)
    return out


def _deletes(value: Mapping, path: str) -> bool:
    flag = value.get(DELETE_KEY, False)
    if not isinstance(flag, bool):
        raise ConfigError(f"'{path}.{DELETE_KEY}' must be True or False, got {flag!r}")
    return flag


def _strip_delete(value: Any, path: str) -> Any:
    if isinstance(value, Mapping):
        _deletes(value, path)
        return {
            k: _strip_delete(v, join_path(path, k)) for k, v in value.items() if k != DELETE_KEY
        }
    if isinstance(value, list):
        return [_strip_delete(v, join_path(path, i)) for i, v in enumerate(value)]
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(_strip_delete(v, join_path(path, i)) for i, v in enumerate(value))
    return value


# --- YAML and JSON -----------------------------------------------------------------------


def _read_data_file(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".json":
            data = json.loads(text) if text.strip() else {}
        else:
            data = yaml.load(text, Loader=YamlLoader)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"invalid JSON in {path}, line {e.lineno} column {e.colno}: {e.msg}"
            + _excerpt(text, e.lineno, e.colno)
        ) from e
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_message(e, path, text)) from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path} must hold a mapping of keys to values at the top level, "
            f"got {type(data).__name__}"
        )
    return data


def _excerpt(text: str, line: int, column: int) -> str:
    """The offending line and a caret under ``column`` (both 1-based), or "" past the end."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return ""
    source = lines[line - 1].rstrip()[:200]
    return f"\n  {source}\n  {' ' * (max(column, 1) - 1)}^"


def _yaml_message(e: yaml.YAMLError, path: Path, text: str) -> str:
    """At most three lines: the file, line, column and problem; the line; a caret."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or getattr(e, "context", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    if mark is None:
        return f"invalid YAML in {path}: {problem}"
    if context and context != problem and getattr(e, "context_mark", None) is not None:
        cm = e.context_mark
        problem += f" ({context} at line {cm.line + 1} column {cm.column + 1})"
    return (f"invalid YAML in {path}, line {mark.line + 1} column {mark.column + 1}: {problem}"
            + _excerpt(text, mark.line + 1, mark.column + 1))


def _substitute(value: Any, base: ConfigDict | None, path: Path, where: str) -> Any:
    """Replace ``"{{_base_.a.b}}"`` strings below ``value`` with base values."""
    if isinstance(value, str):
        match = _REFERENCE.match(value)
        if not match:
            return value
        if base is None:
            raise ConfigError(f"{path}: '{where}' refers to {value} but the file has no _base_")
        try:
            return copy.deepcopy(get_by_path(base, match.group(1)))
        except ConfigError as e:
            raise ConfigError(
                f"{path}: '{where}' refers to {value}, which is missing: {e}"
            ) from None
    if isinstance(value, dict):
        return {k: _substitute(v, base, path, join_path(where, k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, base, path, join_path(where, i)) for i, v in enumerate(value)]
    return value


# --- Python ------------------------------------------------------------------------------


def _load_python(path: Path, chain: tuple[Path, ...]) -> ConfigDict:
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as e:
        raise ConfigError(f"syntax error in {path}, line {e.lineno}: {e.msg}") from e
    node = _find_base_assignment(tree, path)
    base = None
    if node is not None:
        try:
            refs = ast.literal_eval(node.value)
        except ValueError:
            raise ConfigError(
                f"{path}, line {node.lineno}: _base_ must be a literal path or list of paths "
                "(no variables or expressions), because it is read before the file runs"
            ) from None
        base = _load_bases(refs, path, chain)
        # Run the file with `_base_ = <the merged bases>` in place of the literal list.
        node.value = ast.copy_location(ast.Name(id=_BASE_VAR, ctx=ast.Load()), node.value)
        ast.fix_missing_locations(tree)
    namespace: dict[str, Any] = {
        "__builtins__": builtins,
        "__file__": str(path),
        "__name__": "__libai_config__",
        _BASE_VAR: copy.deepcopy(base) if base is not None else None,
    }
    try:
        exec(compile(tree, str(path), "exec"), namespace)
    except Exception as e:
        kind = "" if isinstance(e, ConfigError) else f"{type(e).__name__}: "
        line = _line_of(e, path)
        hint = ""
        if isinstance(e, TypeError | ValueError) and "dict(" in _source_line(source, line):
            hint = " (dict() takes another dict or key=value arguments)"
        raise ConfigError(f"error in config {path}{line}: {kind}{e}{hint}") from e
    values = {
        k: v
        for k, v in namespace.items()
        if not k.startswith("_") and not isinstance(v, _DROPPED_TYPES)
    }
    return merge(base, values)


_DROPPED_TYPES = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


def _assigns_base(stmt: ast.AST) -> bool:
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    else:
        return False
    return any(isinstance(t, ast.Name) and t.id == BASE_KEY for t in targets)


def _find_base_assignment(tree: ast.Module, path: Path) -> ast.Assign | ast.AnnAssign | None:
    found = None
    top = set(map(id, tree.body))
    for stmt in ast.walk(tree):
        if not _assigns_base(stmt):
            continue
        if id(stmt) not in top or isinstance(stmt, ast.AugAssign):
            raise ConfigError(
                f"{path}, line {stmt.lineno}: _base_ must be assigned once, at the top level of "
                "the file, as `_base_ = [...]`"
            )
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if len(targets) != 1 or stmt.value is None:
            raise ConfigError(f"{path}, line {stmt.lineno}: write _base_ as `_base_ = [...]`")
        if found is not None:
            raise ConfigError(
                f"{path}: _base_ is assigned twice (lines {found.lineno} and {stmt.lineno})"
            )
        found = stmt
    return found


def _source_line(source: str, line: str) -> str:
    """The text of ``line`` (``", line N"`` from :func:`_line_of`) in ``source``."""
    lines = source.splitlines()
    number = int(line.rsplit(" ", 1)[-1]) if line else 0
    return lines[number - 1] if 0 < number <= len(lines) else ""


def _line_of(error: BaseException, path: Path) -> str:
    """``", line N"`` of the innermost traceback frame in the config file, if any."""
    line = getattr(error, "lineno", None) if isinstance(error, SyntaxError) else None
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == str(path):
            line = tb.tb_lineno
        tb = tb.tb_next
    return f", line {line}" if line else ""
