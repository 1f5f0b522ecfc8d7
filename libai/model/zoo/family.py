"""A model family, registered once: everything libai knows of BERT, GPT-2, Llama or RoBERTa as
a family sits in one :class:`ModelFamily` record (torchtitan's ``ModelSpec`` is the idea).

A family's model file declares its record and registers each of its classes with it::

    GPT2 = ModelFamily("gpt2", "GPT-2", config=GPTConfig, main="GPTForCausalLM",
                       blocks=("TransformerBlock",), shape_args=(...),
                       adapter="libai.model.zoo.hf_gpt2.GPT2Adapter")

    @GPT2.register
    class GPTForCausalLM(CausalLM, nn.Module): ...

``register`` puts the class in ``MODELS`` and gives it the record's name as ``hf_model_type``
and its blocks as ``parallel_blocks``: the model contract's attributes (libai.model.contract),
which the engine reads from any model, a user's as well. The other parts the pipeline and
tensor parallel read stay where the contract looks for them: ``pipeline_split``,
``pipeline_first``, ``pipeline_block_kwargs``, ``pipeline_last`` and ``count_items`` on a
class, ``tp_plan`` / ``tp_divisible`` on its blocks; :meth:`ModelFamily.parts` lists them.

The Hugging Face adapter (weights and tokenizer both ways, ``hf_<name>.py`` on the base
``hf_base.HFAdapter``) is named by its dotted path: the adapter imports the model file, so
neither the model file nor this one imports it. ``hf.py`` finds a folder's family by its
``model_type`` (:func:`get_family`), a model's by its ``hf_model_type``, and imports the
adapter the record names when it first needs it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from libai.registry import MODELS
from libai.utils.errors import CheckpointError
from libai.utils.suggest import did_you_mean

from ..contract import CONTRACT
from .config import ModelConfig

__all__ = ["ModelFamily", "families", "get_family"]

_FAMILIES: dict[str, ModelFamily] = {}
# what a family's classes may declare for the pipeline and tensor parallel (see the contract)
_PARTS = tuple(f.name for f in CONTRACT if f.name.startswith(("pipeline_", "count_items", "tp_")))


@dataclass(frozen=True, eq=False)
class ModelFamily:
    """One model family's record.

    Args:
        name: Hugging Face's ``model_type`` ("gpt2"); the classes' ``hf_model_type``.
        title: The family in messages ("GPT-2").
        config: The config dataclass of the family, with its defaults (``GPTConfig``).
        main: The class a folder of this family builds when a config asks for another family.
        blocks: Class names of the repeated blocks, the classes' ``parallel_blocks`` (FSDP,
            activation checkpointing and pipeline stages split by them).
        shape_args: The config fields that change the function the model computes: a
            checkpoint loaded into a built model must agree on them.
        adapter: Dotted path of the Hugging Face adapter class (an ``hf_base.HFAdapter``).
        classes: The registered classes, filled by :meth:`register`.

    Raises:
        ValueError: Two families of one name.
    """

    name: str
    title: str
    config: type[ModelConfig]
    main: str
    blocks: tuple[str, ...]
    shape_args: tuple[str, ...]
    adapter: str
    classes: list[type] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.name in _FAMILIES:
            raise ValueError(f"model family {self.name!r} is registered twice: give the new one "
                             f"another name")
        _FAMILIES[self.name] = self

    def register(self, cls: type) -> type:
        """Class decorator: register ``cls`` in ``MODELS`` as a member of this family."""
        cls.hf_model_type = self.name
        cls.parallel_blocks = self.blocks
        MODELS.register_module(module=cls)
        self.classes.append(cls)
        return cls

    def parts(self) -> dict[str, tuple[str, ...]]:
        """Per class, and per block class, the pipeline and tensor-parallel fields it declares
        on the class (what ``libai.parallel`` reads through the contract; ``tp_divisible``,
        which depends on the config, is set on each block when it is built)."""
        out = {c.__name__: tuple(p for p in _PARTS if hasattr(c, p)) for c in self.classes}
        # a block class is named, not held: look it up where the classes (or their bases) live
        modules = {sys.modules[k.__module__] for c in self.classes for k in c.__mro__
                   if k.__module__.startswith("libai.")}
        for module in modules:
            for block in self.blocks:
                found = getattr(module, block, None)
                if isinstance(found, type):
                    out[block] = tuple(p for p in _PARTS if hasattr(found, p))
        return {k: v for k, v in out.items() if v}


def families() -> tuple[ModelFamily, ...]:
    """Every registered family, by name."""
    return tuple(_FAMILIES[k] for k in sorted(_FAMILIES))


def get_family(name: Any) -> ModelFamily:
    """The family of a Hugging Face ``model_type`` (a model's ``hf_model_type``).

    Raises:
        CheckpointError: No such family; the message names those libai converts.
    """
    if name not in _FAMILIES:
        raise CheckpointError(f"model_type {name!r} in config.json is not supported: libai "
                              f"converts {sorted(_FAMILIES)}.{did_you_mean(str(name), _FAMILIES)}")
    return _FAMILIES[name]
