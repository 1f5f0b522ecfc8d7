"""The model's repeated blocks, found by class name: the units that FSDP shards, activation
checkpointing recomputes, graph mode compiles one by one, a pipeline stage holds, and layer-wise
lr decay counts. Below both ``libai.parallel`` and ``libai.optim``, which both need them."""

from __future__ import annotations

from torch import nn

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["class_names", "find_blocks", "outermost"]


def find_blocks(model: nn.Module, names: tuple[str, ...] | list[str] | None,
                key: str = "parallel.blocks") -> list[nn.Module]:
    """The modules whose class, or a base class, is named in ``names`` (None: the model's
    ``parallel_blocks``). Base classes count because fully_shard turns a ``TransformerBlock``
    into an ``FSDPTransformerBlock``.

    Raises:
        ConfigError: a name that no module's class has (``key`` says which setting named it).
    """
    names = tuple(names if names is not None else getattr(model, "parallel_blocks", ()))
    if not names:
        return []
    modules = [m for m in model.modules() if m is not model]
    found = [m for m in modules if class_names(m) & set(names)]
    missing = [n for n in names if not any(n in class_names(m) for m in model.modules())]
    if missing:
        classes = sorted({type(m).__name__ for m in model.modules()})
        raise ConfigError(
            f"{key}: {type(model).__name__} has no module of class {missing[0]!r}."
            f"{did_you_mean(missing[0], classes)} Its classes: {', '.join(classes)}.")
    return found


def class_names(module: nn.Module) -> set[str]:
    """The names of ``module``'s class and its base classes."""
    return {c.__name__ for c in type(module).__mro__}


def outermost(blocks: list[nn.Module]) -> list[nn.Module]:
    """``blocks`` without those inside another of them (graph mode compiles an inner block as
    part of its outer one)."""
    inner = {id(m) for block in blocks for m in block.modules() if m is not block}
    return [block for block in blocks if id(block) not in inner]
