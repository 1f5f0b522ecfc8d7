"""Layer-wise learning-rate decay: the lower layers of a pretrained encoder learn slower.

Fine-tuning practice from ELECTRA and BEiT: with a decay rate ``r`` and ``L`` repeated blocks,
a parameter of layer ``i`` trains at ``lr * r ** (L + 1 - i)``. The layers are found from the
model, not from parameter-name patterns:

- layer ``k + 1``: the parameters of the k-th repeated block (0-based, in module order). The block
  classes are the model's ``parallel_blocks`` (libai.model.contract), or
  ``paramwise_cfg.layer_decay_blocks`` for a model that does not declare them;
- layer 0: the parameters outside every block whose full name contains ``embed`` (an
  ``embeddings`` module, a ``pos_embed`` parameter);
- layer ``L + 1``: everything else (final norm, pooler, task heads): the unchanged ``lr``.

:class:`~libai.optim.DefaultOptimWrapperConstructor` reads ``paramwise_cfg.layer_decay_rate``
and multiplies the factor with the other rules' ``lr`` multipliers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from libai.model.blocks import find_blocks
from libai.utils.errors import ConfigError

__all__ = ["LAYER_DECAY_KEYS", "LayerDecay", "check_layer_decay_cfg", "layer_decay_for"]

LAYER_DECAY_KEYS = ("layer_decay_rate", "layer_decay_blocks")
_PATH = "optim_wrapper.paramwise_cfg"


def check_layer_decay_cfg(cfg: Mapping[str, Any]) -> None:
    """Refuse bad ``layer_decay_rate`` / ``layer_decay_blocks`` values of a ``paramwise_cfg``.

    Raises:
        ConfigError: the rate is not a number in (0, 1], the blocks are not a non-empty list of
            class names, or the blocks are given without a rate.
    """
    rate, blocks = cfg.get("layer_decay_rate"), cfg.get("layer_decay_blocks")
    if rate is None:
        if blocks is not None:
            raise ConfigError(
                f"{_PATH}.layer_decay_blocks={blocks!r} is set but layer_decay_rate is not: add "
                f"layer_decay_rate (e.g. 0.65) or remove layer_decay_blocks.")
        return
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1:
        raise ConfigError(
            f"{_PATH}.layer_decay_rate={rate!r}: expected a number in (0, 1] (the lr factor from "
            f"one layer to the one below it; 0.65-0.9 is usual, 1 turns the decay off).")
    if blocks is not None and (isinstance(blocks, str) or not isinstance(blocks, (list, tuple))
                               or not blocks or not all(isinstance(b, str) for b in blocks)):
        raise ConfigError(
            f"{_PATH}.layer_decay_blocks={blocks!r}: expected a list of class names of the "
            f"repeated blocks, e.g. ['TransformerBlock'].")


@dataclass(frozen=True)
class LayerDecay:
    """The layer of every parameter of a model, and the lr factor it gets.

    Args:
        rate: The decay rate ``r``.
        num_blocks: ``L``, the number of repeated blocks found.
        block_names: The class names the blocks were found by.
        layer_of: ``{id(parameter): layer}``, layers 0 (embeddings) to ``L + 1`` (the rest).
    """

    rate: float
    num_blocks: int
    block_names: tuple[str, ...]
    layer_of: Mapping[int, int]

    def scale(self, param: nn.Parameter) -> float:
        """``rate ** (L + 1 - layer)``: the factor of ``param``'s ``lr``."""
        return self.rate ** (self.num_blocks + 1 - self.layer_of[id(param)])

    def summary(self, named_params: Iterable[tuple[str, nn.Parameter]]) -> str:
        """One line for the log: the factors of the embeddings, the blocks and the rest, with
        what ended up in the embeddings and the rest (the trainable ``named_params``)."""
        top = self.num_blocks + 1
        tensors: Counter[int] = Counter()
        rest: list[str] = []
        embeddings: list[str] = []
        for name, param in named_params:
            layer = self.layer_of[id(param)]
            tensors[layer] += 1
            group = embeddings if layer == 0 else rest if layer == top else None
            module = name.rsplit(".", 1)[0] if "." in name else name
            if group is not None and module not in group:
                group.append(module)
        blocks = ", ".join(self.block_names)
        if embeddings:
            first = f"x {self.rate ** top:.3g} for the embeddings ({_listed(embeddings)})"
        else:
            first = "no trainable parameter outside the blocks has 'embed' in its name"
        return (
            f"Layer-wise lr decay {self.rate:g} over {self.num_blocks} blocks ({blocks}): lr "
            f"{first}; x {self.rate ** self.num_blocks:.3g} (block 1) to x {self.rate:.3g} "
            f"(block {self.num_blocks}); x 1 for the rest ({_listed(rest) if rest else 'none'})."
        )


def _listed(modules: list[str], most: int = 4) -> str:
    shown = ", ".join(modules[:most])
    return shown + (f" and {len(modules) - most} more" if len(modules) > most else "")


def layer_decay_for(model: nn.Module, rate: float, blocks: list[str] | None = None) -> LayerDecay:
    """Assign every parameter of ``model`` to its layer (see the module docstring).

    Args:
        model: The model as built (the run's ``execution.unwrapped``: no DDP or compile
            wrapper around it).
        rate: The decay rate, in (0, 1].
        blocks: Class names of the repeated blocks. Defaults to None: the model's
            ``parallel_blocks``.

    Raises:
        ConfigError: no block class is known, or no module has a named class.
    """
    names = tuple(blocks or getattr(model, "parallel_blocks", None) or ())
    if not names:
        hint = _repeated_classes(model)
        example = f"{hint[0]!r}" if hint else "'MyBlock'"
        raise ConfigError(
            f"{_PATH}.layer_decay_rate needs the model's repeated blocks, and "
            f"{type(model).__name__} does not declare them (no `parallel_blocks`, "
            f"libai.model.contract). Name their class: {_PATH}.layer_decay_blocks=[{example}]"
            + (f" (repeated classes in this model: {', '.join(hint)})." if hint else "."))
    key = f"{_PATH}.layer_decay_blocks" if blocks else f"{type(model).__name__}.parallel_blocks"
    found = find_blocks(model, names, key=key)
    # a block nested in another block (a matched base class) belongs to the outer one
    nested = {id(m) for b in found for m in b.modules() if m is not b}
    outer = [b for b in found if id(b) not in nested]
    layer_of: dict[int, int] = {}
    for k, block in enumerate(outer):
        for p in block.parameters():
            layer_of.setdefault(id(p), k + 1)
    top = len(outer) + 1
    params = list(model.named_parameters(remove_duplicate=False))
    for name, p in params:  # a tied weight is an embedding if any of its names says so
        if id(p) not in layer_of and "embed" in name:
            layer_of[id(p)] = 0
    for _, p in params:
        layer_of.setdefault(id(p), top)
    return LayerDecay(float(rate), len(outer), names, layer_of)


def _repeated_classes(model: nn.Module) -> list[str]:
    """Classes of the model's own code (not torch's) that occur more than once: block candidates."""
    counts = Counter(type(m).__name__ for m in model.modules()
                     if not type(m).__module__.startswith("torch."))
    return [name for name, n in counts.most_common() if n > 1][:3]
