"""``custom_imports``: modules a config names, imported before anything is built.

::

    custom_imports = dict(imports=["my_hooks", "my_pkg.models"], allow_failed_imports=False)

Importing a module runs its ``@HOOKS.register_module()`` / ``@MODELS.register_module()``
decorators, so ``type="MyHook"`` is found. While importing, the config file's folder and the
working directory are on ``sys.path`` (first, as for a script or ``python -m``), so a module
next to the config needs no ``PYTHONPATH``. ``sys.path`` is restored afterwards.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from libai.utils.errors import ConfigError
from libai.utils.imports import module_missing, on_sys_path
from libai.utils.suggest import refuse_unknown

__all__ = ["CUSTOM_IMPORTS_KEYS", "import_custom_modules"]

CUSTOM_IMPORTS_KEYS = ("imports", "allow_failed_imports")
_EXAMPLE = "custom_imports=dict(imports=['my_module'], allow_failed_imports=False)"


def import_custom_modules(spec: Any, config_file: str | os.PathLike | None = None) -> list[ModuleType]:
    """Import the modules listed in ``spec`` (the ``custom_imports`` config value).

    Args:
        spec: ``dict(imports=[module names], allow_failed_imports=False)``; ``imports`` may be
            one name. None imports nothing.
        config_file: The config file the spec came from; its folder is searched first.
            Defaults to None (only the working directory is added).

    Returns:
        The modules imported, in order (a module that failed with ``allow_failed_imports=True``
        is left out).

    Raises:
        ConfigError: ``spec`` is malformed, or a module cannot be imported (names the module,
            the folders searched and the error) and ``allow_failed_imports`` is False. An
            exception raised by the module's own code (not an ImportError) is an error even
            with ``allow_failed_imports=True``.
    """
    if spec is None:
        return []
    names, allow_failed = _parse(spec)
    folders = _search_folders(config_file)
    modules = []
    with on_sys_path(folders):
        importlib.invalidate_caches()  # modules written since the interpreter started
        for name in names:
            try:
                modules.append(importlib.import_module(name))
            except ImportError as e:
                message = _failure(name, e, folders)
                if not allow_failed:
                    raise ConfigError(
                        f"{message} Fix the name or the module, or set "
                        f"custom_imports.allow_failed_imports=True to go on without it."
                    ) from e
                warnings.warn(f"{message} Going on without it (allow_failed_imports=True).",
                              stacklevel=2)
            except Exception as e:
                raise ConfigError(_failure(name, e, folders) + " (--debug shows the traceback)") from e
    return modules


def _parse(spec: Any) -> tuple[list[str], bool]:
    if not isinstance(spec, Mapping):
        hint = " (write it as custom_imports=dict(imports=[...]))" if isinstance(spec, (list, tuple, str)) else ""
        raise ConfigError(f"custom_imports must be a dict such as {_EXAMPLE}, got "
                          f"{type(spec).__name__} {spec!r}{hint}.")
    refuse_unknown(spec, CUSTOM_IMPORTS_KEYS, lambda key: f"custom_imports has an unknown key {key!r}")
    if "imports" not in spec:
        raise ConfigError(f"custom_imports needs an 'imports' key listing module names: {_EXAMPLE}.")
    imports = spec["imports"]
    if isinstance(imports, str):  # mmengine accepts one name
        imports = [imports]
    if not isinstance(imports, Sequence) or not all(isinstance(n, str) and n.strip() for n in imports):
        raise ConfigError(
            f"custom_imports.imports must be a list of module names (strings) such as "
            f"['my_module', 'my_pkg.hooks'], got {imports!r}."
        )
    for name in imports:
        if name.endswith(".py") or "/" in name or "\\" in name:
            module = os.path.splitext(name)[0].replace("\\", "/").strip("/").replace("/", ".")
            raise ConfigError(
                f"custom_imports.imports: {name!r} is a file path; give the module name as for "
                f"an import statement, e.g. {module!r} (the config's folder and the working "
                f"directory are searched)."
            )
    allow = spec.get("allow_failed_imports", False)
    if not isinstance(allow, bool):
        raise ConfigError(f"custom_imports.allow_failed_imports must be True or False, got {allow!r}.")
    return [n.strip() for n in imports], allow


def _search_folders(config_file: str | os.PathLike | None) -> dict[str, str]:
    """{folder: what it is}, searched in this order."""
    folders = {}
    if config_file is not None:
        folders[os.path.dirname(os.path.abspath(os.fspath(config_file)))] = "the config's folder"
    cwd = os.getcwd()
    folders[cwd] = "the config's folder and working directory" if cwd in folders else "the working directory"
    return folders


def _failure(name: str, error: BaseException, folders: dict[str, str]) -> str:
    """One line: which module, where it was looked for, and the error's first line."""
    text = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    what = f"{type(error).__name__}: {text}" if text else type(error).__name__
    where = " and ".join(f"{label} {folder}" for folder, label in folders.items())
    if module_missing(name, error):
        return f"custom_imports: cannot import {name!r}: {what}. Searched {where}, then sys.path."
    return f"custom_imports: importing {name!r} failed: {what}. (Searched {where}, then sys.path.)"
