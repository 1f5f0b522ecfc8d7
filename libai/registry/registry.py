"""A Registry maps ``type`` names to classes or functions, and builds objects from config dicts.

>>> MODELS = Registry("model")
>>> @MODELS.register_module()
... class Net: ...
>>> MODELS.build(dict(type="Net"))

``cfg["type"]`` may be a registered name, a dotted import path (``"torch.nn.Linear"``) or the
class/callable itself. Child registries see their parents. ``locations`` are modules imported on
the first miss, so that a class registered by an import side effect is found without the user
importing it first.
"""

from __future__ import annotations

import importlib
import inspect
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from libai.utils.errors import BuildError, RegistryError
from libai.utils.imports import import_module, module_missing, not_on_sys_path
from libai.utils.suggest import did_you_mean

from .diagnose import check_annotated_kinds, explain_failure

__all__ = ["Registry", "build_from_cfg"]

# Config paths of the dicts being built right now, innermost last, so that a constructor that
# builds a child from a sub-dict of its own config gets an error path like ``model.encoder``.
_build_stack = threading.local()


def _stack() -> list[tuple[str, Mapping]]:
    if not hasattr(_build_stack, "items"):
        _build_stack.items = []
    return _build_stack.items


def _find_path(cfg: Mapping) -> str | None:
    """Locate ``cfg`` (by identity) inside the configs being built, and return its key path."""
    for path, parent in reversed(_stack()):
        found = _search(parent, cfg, path)
        if found is not None:
            return found
    return None


def _search(node: Any, target: Mapping, path: str, depth: int = 0) -> str | None:
    if depth > 6:
        return None
    items = node.items() if isinstance(node, Mapping) else enumerate(node) if isinstance(node, (list, tuple)) else ()
    for key, value in items:
        sub = f"{path}.{key}" if path else str(key)
        if value is target:
            return sub
        if isinstance(value, (Mapping, list, tuple)):
            found = _search(value, target, sub, depth + 1)
            if found is not None:
                return found
    return None


def _where(obj: Any) -> str:
    """'module.Class (file.py:12)' for error messages."""
    name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
    try:
        file = inspect.getsourcefile(obj)
        line = inspect.getsourcelines(obj)[1]
        return f"{name} ({file}:{line})"
    except (TypeError, OSError):
        return name


class Registry:
    """A named mapping from strings to classes or functions, with ``build`` from config dicts.

    Args:
        name: Human-readable name, used in messages ("model", "hook").
        parent: A registry whose entries this one also sees. Defaults to None.
        locations: Modules to import on the first lookup miss, whose import registers entries.
            Defaults to no modules.
        build_func: Replaces :func:`build_from_cfg` for this registry. Defaults to None.
    """

    def __init__(
        self,
        name: str,
        parent: Registry | None = None,
        locations: list[str] | None = None,
        build_func: Callable[..., Any] | None = None,
    ) -> None:
        self.name = name
        self.parent = parent
        self.locations = list(locations or [])
        self._imported = False
        self._build_func = build_func
        self._module_dict: dict[str, Any] = {}
        self.children: list[Registry] = []
        if parent is not None:
            parent.children.append(self)

    # ----------------------------------------------------------------- registration
    def register_module(
        self, name: str | list[str] | None = None, force: bool = False, module: Any = None
    ) -> Any:
        """Register a class or function, as a decorator or a call.

        ``@REG.register_module()``, ``@REG.register_module(name="Alias")`` or
        ``REG.register_module(module=cls)``. A duplicate name is an error unless ``force=True``.
        """
        if module is not None:
            self._register(module, name, force)
            return module

        def deco(obj: Any) -> Any:
            self._register(obj, name, force)
            return obj

        return deco

    def _register(self, obj: Any, name: str | list[str] | None, force: bool) -> None:
        if not callable(obj):
            raise RegistryError(f"Registry '{self.name}' can only hold classes or functions, got {obj!r}")
        names = [name] if isinstance(name, str) else list(name or [obj.__name__])
        for n in names:
            old = self._module_dict.get(n)
            if old is not None and old is not obj and not force:
                raise RegistryError(
                    f"'{n}' is already registered in registry '{self.name}' by {_where(old)}; "
                    f"the new definition is {_where(obj)}. Rename one of them, or pass "
                    f"register_module(force=True) to replace it on purpose."
                )
            self._module_dict[n] = obj

    # ---------------------------------------------------------------------- lookup
    def _import_locations(self) -> None:
        reg: Registry | None = self
        while reg is not None:
            if not reg._imported:
                reg._imported = True
                for loc in reg.locations:
                    try:
                        importlib.import_module(loc)
                    except ImportError as e:
                        raise RegistryError(
                            f"Registry '{reg.name}' could not import '{loc}', the module that "
                            f"registers its entries: {e}"
                        ) from e
            reg = reg.parent

    def _lookup(self, name: str) -> Any:
        reg: Registry | None = self
        while reg is not None:
            if name in reg._module_dict:
                return reg._module_dict[name]
            reg = reg.parent
        return None

    def get(self, name: str | Any, path: str | None = None) -> Any:
        """Return the class or function registered as ``name`` (a name or a dotted import path).

        Args:
            name: A registered name, a dotted import path, or the class itself.
            path: The config path of the dict whose ``type`` this is, for the message.
                Defaults to None.

        Raises:
            RegistryError: naming the registry, the scopes searched and the closest names.
        """
        if path is not None:
            try:
                return self.get(name)
            except RegistryError as e:
                raise RegistryError(f"{path}.type={name!r}: {e}") from e
        if not isinstance(name, str):
            if callable(name):
                return name
            raise RegistryError(
                f"Registry '{self.name}': 'type' must be a registered name, a dotted import "
                f"path or a class, got {type(name).__name__} {name!r}"
            )
        obj = self._lookup(name)
        if obj is None:
            self._import_locations()
            obj = self._lookup(name)
        if obj is None and "." in name:
            obj = self._import_path(name)
        if obj is None:
            scopes = " -> ".join(f"'{r.name}'" for r in self._scopes())
            known = self.keys()
            hint = did_you_mean(name, known) or (
                f" Registered names: {', '.join(sorted(known)[:20])}"
                + (", ..." if len(known) > 20 else "") + "."
                if known else " The registry is empty."
            )
            raise RegistryError(
                f"'{name}' is not registered in registry '{self.name}' "
                f"(searched {scopes}).{hint} A custom class must be decorated with "
                f"@{self.name.upper()}S.register_module() and its module imported, or given "
                f"as a dotted path such as 'my_pkg.module.ClassName'."
            )
        return obj

    def _import_path(self, path: str) -> Any:
        module_name, _, attr = path.rpartition(".")
        try:
            module = _import_module(module_name)
        except ImportError as e:
            raise RegistryError(
                f"Registry '{self.name}': '{path}' is not a registered name and its module "
                f"'{module_name}' cannot be imported ({e}; searched sys.path and the working "
                f"directory {os.getcwd()})."
            ) from e
        if not hasattr(module, attr):
            hint = did_you_mean(attr, [a for a in dir(module) if not a.startswith("_")])
            raise RegistryError(f"Module '{module_name}' has no attribute '{attr}'.{hint}")
        return getattr(module, attr)

    def _scopes(self) -> list[Registry]:
        out, reg = [], self
        while reg is not None:
            out.append(reg)
            reg = reg.parent
        return out

    def keys(self) -> list[str]:
        """All names visible from this registry (its own and its parents')."""
        self._import_locations()
        seen: dict[str, None] = {}
        for reg in self._scopes():
            seen.update(dict.fromkeys(reg._module_dict))
        return list(seen)

    def __contains__(self, name: str) -> bool:
        if self._lookup(name) is None:
            self._import_locations()
        return self._lookup(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __repr__(self) -> str:
        return f"Registry(name={self.name!r}, items={sorted(self._module_dict)})"

    # ----------------------------------------------------------------------- build
    def build(self, cfg: Any, default_args: Mapping | None = None, path: str | None = None) -> Any:
        """Build an object from ``cfg`` (a dict with ``type``); see :func:`build_from_cfg`."""
        func = self._build_func or build_from_cfg
        return func(cfg, self, default_args=default_args, path=path)


def _import_module(name: str) -> Any:
    """``importlib.import_module``, also looking in the working directory if it is not on
    ``sys.path`` (``python tools/train.py`` puts ``tools/`` there, ``python -m`` the working
    directory): a project's ``my_pkg.models.Net`` is then found without ``PYTHONPATH``."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if not module_missing(name, e) or not not_on_sys_path([os.getcwd()]):
            raise
    return import_module(name, [os.getcwd()])


def build_from_cfg(
    cfg: Any, registry: Registry, default_args: Mapping | None = None, path: str | None = None
) -> Any:
    """Build ``registry.get(cfg["type"])(**rest_of_cfg, **default_args)``.

    Args:
        cfg: A mapping with a ``type`` key. Keys from ``cfg`` win over ``default_args``.
        registry: Where ``type`` is looked up.
        default_args: Arguments used when ``cfg`` does not set them. Defaults to None.
        path: The config key path of ``cfg`` (``"model"``), for messages. Defaults to the path
            found by searching the configs being built, if ``cfg`` is nested in one.

    Raises:
        RegistryError: ``type`` is missing or unknown.
        BuildError: the constructor rejects the arguments (names the class, the config path,
            the bad argument and the closest parameter names) or fails while running.
    """
    if not isinstance(cfg, Mapping):
        raise BuildError(
            f"Cannot build a {registry.name} from {type(cfg).__name__} {cfg!r}"
            + (f" at '{path}'" if path else "")
            + ": expected a dict with a 'type' key."
        )
    path = path or _find_path(cfg) or registry.name
    args = dict(cfg)
    if "type" not in args:
        if default_args is None or "type" not in default_args:
            keys = ", ".join(sorted(map(str, args))) or "none"
            raise RegistryError(
                f"'{path}' needs a 'type' key naming the {registry.name} to build "
                f"(keys given: {keys})."
            )
        args["type"] = default_args["type"]
    obj_type = args.pop("type")
    for k, v in (default_args or {}).items():
        if k != "type":
            args.setdefault(k, v)
    obj_cls = registry.get(obj_type, path=path)
    _check_signature(obj_cls, args, path)
    check_annotated_kinds(obj_cls, args, path)
    _stack().append((path, cfg))
    try:
        return obj_cls(**args)
    except (BuildError, RegistryError):
        raise
    except Exception as e:
        error = explain_failure(e, obj_cls, args, path)
        if error is None:  # not what a bad value causes: a bug, keep its traceback
            raise
        raise error from e
    finally:
        _stack().pop()


def _name(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or repr(obj)


def _check_signature(obj_cls: Any, args: dict, path: str) -> None:
    try:
        sig = inspect.signature(obj_cls)
    except (TypeError, ValueError):
        return  # builtins without a signature: let the call itself fail
    params = sig.parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        known_unknown: list[str] = []
    else:
        accepted = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        known_unknown = [k for k in args if k not in accepted]
        if known_unknown:
            bad = known_unknown[0]
            hint = did_you_mean(bad, accepted)
            valid = ", ".join(accepted) or "none"
            raise BuildError(
                f"{_name(obj_cls)} at '{path}' got an unexpected argument '{bad}'.{hint} "
                f"Valid arguments: {valid}."
            )
    missing = [
        n for n, p in params.items()
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in args
    ]
    if missing:
        raise BuildError(
            f"{_name(obj_cls)} at '{path}' is missing required argument(s): "
            f"{', '.join(repr(m) for m in missing)}. Add them to the config dict at '{path}'."
        )

