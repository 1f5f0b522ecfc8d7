"""``Config``: a loaded config file, with overrides, dumping, diffs and a read-only mode.

>>> cfg = Config.fromfile("configs/mlp_digits.py")
>>> cfg.merge_from_options(["optim_wrapper.optimizer.lr=0.01"])
>>> cfg.model.hidden          # attribute access; a typo raises with a suggestion
>>> cfg.dump("work_dir/config.py")
>>> cfg.freeze()              # from now on, writes raise ConfigError

See ``docs/config.md`` for the file formats, ``_base_`` inheritance and ``--cfg-options``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from libai.utils.errors import ConfigError

from .config_dict import ConfigDict, to_plain
from .diff import diff, diff_text
from .formats import json_text, python_text, yaml_text
from .loader import load_file, resolve
from .options import apply_options

__all__ = ["Config"]

# Attributes of the Config object itself; every other attribute name is a config key.
_OWN = ("_cfg_dict", "_filename")


class Config(MutableMapping):
    """A config: a :class:`ConfigDict` of values plus the file it came from.

    Keys read as items or attributes (``cfg["model"]``, ``cfg.model``); nested dicts are
    ConfigDicts, so ``cfg.model.hidden`` works too. A missing key raises ``ConfigKeyError``
    (both a ``KeyError`` and an ``AttributeError``) with a did-you-mean. Keys named like a
    method of this class (``dump``, ``copy``, ``items``...) are reachable as items only.

    Args:
        cfg_dict: Initial values, copied (dicts and lists; leaf values are shared); nested
            dicts become ConfigDicts. Defaults to None (empty).
        filename: The file the values came from. Defaults to None.
    """

    def __init__(
        self, cfg_dict: Mapping | None = None, filename: str | os.PathLike | None = None
    ) -> None:
        if cfg_dict is None:
            cfg_dict = {}
        if not isinstance(cfg_dict, Mapping):
            raise ConfigError(f"Config() takes a dict, got {type(cfg_dict).__name__}")
        if isinstance(cfg_dict, Config) and filename is None:
            filename = cfg_dict.filename
        # Copy the containers so that the new config never shares a dict or list with the
        # caller's (a frozen one included); leaf values are shared.
        object.__setattr__(self, "_cfg_dict", ConfigDict(to_plain(cfg_dict)))
        object.__setattr__(self, "_filename", None if filename is None else os.fspath(filename))

    @classmethod
    def fromfile(cls, filename: str | os.PathLike) -> Config:
        """Load a ``.py``, ``.yaml``/``.yml`` or ``.json`` file with its ``_base_`` files merged.

        Args:
            filename: Path to the file, or ``"libai::<path>"`` for a config shipped with libai.

        Raises:
            ConfigError: The file or one of its bases is missing, malformed or circular.
        """
        path = resolve(filename)
        cfg = cls(filename=str(path))
        object.__setattr__(cfg, "_cfg_dict", load_file(path))
        return cfg

    @property
    def filename(self) -> str | None:
        """Absolute path of the file this config was loaded from, or None."""
        return self._filename

    # --- mapping protocol ----------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        return self._cfg_dict[key]

    def get(self, key: Any, default: Any = None) -> Any:
        # the dict's own get: Mapping.get would build a missing key's did-you-mean message
        return self._cfg_dict.get(key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._cfg_dict[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._cfg_dict[key]

    def __iter__(self) -> Iterator:
        return iter(self._cfg_dict)

    def __len__(self) -> int:
        return len(self._cfg_dict)

    def __contains__(self, key: object) -> bool:
        return key in self._cfg_dict

    def __getattr__(self, name: str) -> Any:
        cfg_dict = self.__dict__.get("_cfg_dict")
        if cfg_dict is None or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return getattr(cfg_dict, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN or hasattr(type(self), name):
            raise ConfigError(
                f"'{name}' is a Config attribute; set a key of that name with cfg['{name}'] = ..."
            )
        self._cfg_dict[name] = value

    def __delattr__(self, name: str) -> None:
        del self._cfg_dict[name]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            other = other._cfg_dict
        return isinstance(other, Mapping) and dict(self._cfg_dict) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Merge a mapping in key by key (nested dicts merge rather than being replaced)."""
        self._cfg_dict.update(*args, **kwargs)

    def to_dict(self) -> dict:
        """The values as plain ``dict``/``list`` (tuples stay tuples); a copy of the containers."""
        return to_plain(self._cfg_dict)

    # --- overrides ---------------------------------------------------------------------------

    def merge_from_options(self, options: Sequence[str] | Mapping[str, Any] | None) -> None:
        """Apply ``--cfg-options`` style overrides in place.

        ``["a.b=1", "c=[1,2]", "d.0.x=3", "e=None", "g=abc", "+new.key=5"]``: values are
        Python literals read with ``ast.literal_eval``, or else kept as strings. Integer
        components index lists. A value replaces the old one whole. A dict ``{"a.b": 1}`` is
        accepted too; its values are used as they are (not parsed).

        Every key on a path must exist, so a typo fails: the error names the full path, the
        first missing component and the closest existing keys. ``+a.b=1`` adds ``b`` (and
        ``a`` if needed) on purpose.

        Args:
            options: ``KEY=VALUE`` strings, a dict, or None (nothing to do).

        Raises:
            ConfigError: A key is missing, an item is not ``KEY=VALUE``, or the config is frozen.
        """
        apply_options(self._cfg_dict, options)

    # --- text ------------------------------------------------------------------------------

    @property
    def pretty_text(self) -> str:
        """The config as a Python config file, at most 100 columns wide."""
        return python_text(self._cfg_dict, strict=False)

    def dump(self, file: str | os.PathLike) -> None:
        """Write the config to ``file``; the extension picks the format.

        ``.py`` (Python, as :attr:`pretty_text`), ``.yaml``/``.yml`` or ``.json``. Classes and
        functions are written as dotted-path strings. Loading the file gives an equal config.

        Args:
            file: Destination path; missing parent folders are created.

        Raises:
            ConfigError: Unknown extension, or a key or value that the format cannot hold.
        """
        path = Path(file)
        suffix = path.suffix.lower()
        if suffix == ".py":
            text = python_text(self._cfg_dict, strict=True)
        elif suffix in (".yaml", ".yml"):
            text = yaml_text(self._cfg_dict)
        elif suffix == ".json":
            text = json_text(self._cfg_dict)
        else:
            raise ConfigError(
                f"cannot dump config to '{path}': unknown extension '{path.suffix}'; "
                "use .py, .yaml, .yml or .json"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    # --- comparing ---------------------------------------------------------------------------

    def diff(self, other: Mapping) -> list[tuple[str, Any, Any]]:
        """Differences from this config to ``other`` as ``(dotted_path, old, new)``.

        A key that only one side has shows ``libai.config.MISSING`` on the other side.
        """
        return diff(self._cfg_dict, other)

    def diff_text(self, other: Mapping) -> str:
        """A readable, line-per-key report of :meth:`diff` (added, removed, changed)."""
        other_name = getattr(other, "filename", None) or "other"
        return diff_text(self._cfg_dict, other, self.filename or "this config", other_name)

    # --- freezing and copying -------------------------------------------------------------

    def freeze(self) -> Config:
        """Make the config read-only in place: every write raises :class:`ConfigError`.

        Nested dicts refuse writes and lists become ``FrozenList``. Use :meth:`copy` to get a
        mutable copy.

        Returns:
            ``self``, for chaining.
        """
        self._cfg_dict.freeze()
        return self

    @property
    def frozen(self) -> bool:
        """Whether :meth:`freeze` was called."""
        return self._cfg_dict.frozen

    def copy(self) -> Config:
        """A deep, mutable (unfrozen) copy."""
        return copy.deepcopy(self)

    def __copy__(self) -> Config:
        return self.copy()

    def __deepcopy__(self, memo: dict) -> Config:
        out = Config.__new__(type(self))
        object.__setattr__(out, "_cfg_dict", copy.deepcopy(self._cfg_dict, memo))
        object.__setattr__(out, "_filename", self._filename)
        return out

    def __getstate__(self) -> dict:
        return {"cfg_dict": self._cfg_dict, "filename": self._filename}

    def __setstate__(self, state: dict) -> None:
        object.__setattr__(self, "_cfg_dict", state["cfg_dict"])
        object.__setattr__(self, "_filename", state["filename"])

    def __repr__(self) -> str:
        return f"Config(filename={self._filename!r}):\n{self.pretty_text}"
