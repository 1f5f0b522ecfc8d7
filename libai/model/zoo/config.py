"""``ModelConfig``: a model family's arguments as one typed object, written once.

nanoGPT's ``GPTConfig`` is the pattern: a dataclass holds the dimensions and options, and every
class of the family takes it. A config dict still builds a model, because each class also takes
the same values as keyword arguments (``BertForPreTraining(num_layers=2)`` is
``BertForPreTraining(BertPreTrainingConfig(num_layers=2))``), and the class's signature lists
them, so the registry checks names and value kinds before the call as it does for any class.

A config reads as a mapping of its fields as well (``model.config["hidden_size"]``,
``dict(type=..., **model.config)``): the model contract's ``config`` (libai.model.contract).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["ModelConfig", "config_signature"]

C = TypeVar("C", bound="ModelConfig")


class ModelConfig(Mapping):
    """Base of the zoo's config dataclasses: a read-only mapping view of the fields."""

    def __getitem__(self, key: str) -> Any:
        if key not in self.names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The field names, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (a copy)."""
        return {name: getattr(self, name) for name in self.names()}

    def narrow(self, cls: type[C]) -> C:
        """The fields of ``cls`` (a base class of this config) as a ``cls``."""
        return cls(**{name: getattr(self, name) for name in cls.names()})

    @classmethod
    def resolve(cls: type[C], config: C | Mapping[str, Any] | None, kwargs: Mapping[str, Any],
                owner: str) -> C:
        """The config a constructor of ``owner`` was given: ``config`` (an instance or a dict,
        None for the defaults) with ``kwargs`` on top.

        Raises:
            ConfigError: An unknown argument (with the closest field name), or a ``config`` of
                another type.
        """
        names = cls.names()
        unknown = [k for k in kwargs if k not in names]
        if unknown:
            raise ConfigError(
                f"{owner} got an unexpected argument {unknown[0]!r}."
                f"{did_you_mean(unknown[0], names)} Valid arguments: {', '.join(names)}.")
        if isinstance(config, cls):
            return dataclasses.replace(config, **kwargs) if kwargs else config
        if config is None:
            return cls(**kwargs)
        if isinstance(config, Mapping):
            return cls.resolve(None, {**config, **kwargs}, owner)
        raise ConfigError(f"{owner}(config=...) takes a {cls.__name__} or a dict of its fields, "
                          f"got {type(config).__name__}")


class _ClassSignature:
    """``__signature__`` of the class it is set on, and of nothing else: ``inspect.signature``
    of an instance (a module's call) and of a subclass (its own ``__init__``) stay what they were.
    """

    def __init__(self, signature: inspect.Signature) -> None:
        self.signature = signature
        self.owner: type | None = None

    def __set_name__(self, owner: type, name: str) -> None:
        self.owner = owner

    def __get__(self, obj: Any, owner: type) -> inspect.Signature:
        if obj is not None or owner is not self.owner:
            raise AttributeError("__signature__")
        return self.signature


def config_signature(config_cls: type[ModelConfig], **extra: Any) -> _ClassSignature:
    """The signature of a constructor ``(config=None, **fields)``, spelled out: ``config`` then
    every field of ``config_cls`` and every ``extra`` keyword (name=default) as keyword-only
    parameters with their annotations and defaults. Set it as ``__signature__`` in the class body.
    """
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("config", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                annotation=f"{config_cls.__name__} | None")]
    for f in dataclasses.fields(config_cls):
        params.append(inspect.Parameter(f.name, keyword, default=f.default, annotation=f.type))
    params += [inspect.Parameter(name, keyword, default=default,
                                 annotation=type(default).__name__)
               for name, default in extra.items()]
    return _ClassSignature(inspect.Signature(params))
