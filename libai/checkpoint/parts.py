"""The parts a :class:`~libai.checkpoint.Checkpointer` saves, each under a fixed name: anything
with ``state_dict()`` and ``load_state_dict(state)``, and the adapters that make a list of such
objects, the stateful hooks, or the optimizer wrapper under the model's layout one part.

The names the runner gives its parts (the keys of the checkpoint file, since the first libai
checkpoints): ``loop`` (the training position), ``sampler`` (the order of the training data),
``optimizer``, ``param_schedulers``, ``message_hub``, ``hooks``. A part of one's own goes under a
name of its own (``checkpointer.track(name=part)``) and needs nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from libai.utils import dist

__all__ = ["HookStates", "OptimizerState", "POSITION", "RESERVED", "StateList", "Stateful"]

# The part whose state is the training position: the meta repeats its iteration and epoch, and a
# file without it holds no training state (it was saved outside training).
POSITION = "loop"
# Keys of the file that are not parts: a part may not take these names.
RESERVED = frozenset({"meta", "state_dict", "rng", "sharded"})


@runtime_checkable
class Stateful(Protocol):
    """What a part of a checkpoint provides (the same protocol as ``torch.distributed.checkpoint``).

    Rank 0 calls ``state_dict()`` at a save; every rank calls ``load_state_dict(state)`` at a
    resume, in the order the parts were tracked. Two optional methods serve a part whose state
    follows the model's layout (:class:`OptimizerState`): ``gather()``, called on every rank
    before a save (it may run collectives), and ``shards()``, what goes into the model's DCP
    shards with it.
    """

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


class StateList:
    """A list of stateful objects as one part (the parameter schedulers): a list of states."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = list(items)

    def state_dict(self) -> list:
        return [item.state_dict() for item in self.items]

    def load_state_dict(self, state: list) -> None:
        for item, st in zip(self.items, state):
            item.load_state_dict(st)


class HookStates:
    """The stateful hooks as one part, keyed by ``hook.state_key`` (``Key#2`` for a second hook
    with the same key). ``hooks`` is called at each save and load: hooks may be added until then."""

    def __init__(self, hooks: Callable[[], Iterable[Any]]) -> None:
        self.hooks = hooks

    def by_key(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for hook in self.hooks():
            if hook.is_stateful():
                key, n = hook.state_key, 1
                while key in out:
                    n += 1
                    key = f"{hook.state_key}#{n}"
                out[key] = hook
        return out

    def state_dict(self) -> dict:
        return {key: hook.state_dict() for key, hook in self.by_key().items()}

    def load_state_dict(self, state: dict) -> None:
        hooks = self.by_key()
        for key, st in state.items():
            if key in hooks:
                hooks[key].load_state_dict(st)


class OptimizerState:
    """The optimizer wrapper as a part, under the model's layout.

    One process, or sharded weights whose optimizer state goes into the DCP shards with them
    (FSDP2 / tensor parallel: the file keeps the rest, and every rank's group settings, which
    the shards lose), or DDP, where the gradients of an unfinished accumulation window differ by
    rank (``no_sync``) and are kept by rank.

    Args:
        wrapper: The optimizer wrapper (its ``state_dict``, ``load_state_dict``,
            ``accumulated_grads`` and ``optimizer``).
        model: The unwrapped model: whether it is sharded, and its parameters' names.
        sharded: The run's ``execution.sharded``. Defaults to None: ``model`` holds DTensors.
    """

    def __init__(self, wrapper: Any, model: Any, sharded: bool | None = None) -> None:
        self.wrapper, self.model, self.sharded = wrapper, model, sharded
        self._groups: list | None = None  # gathered for the next state_dict (rank 0)
        self._grads_by_rank: list | None = None

    def _sharded(self) -> bool:
        from .sharded import is_sharded_model

        return is_sharded_model(self.model) if self.sharded is None else self.sharded

    def shards(self) -> tuple[Any, bool]:
        """The torch optimizer whose state goes into the model's shards, and whether the
        gradients of an unfinished accumulation window go too."""
        return self.wrapper.optimizer, self.wrapper.accumulated_grads() is not None

    def gather(self) -> None:
        """Every rank, before a save: the group settings of every rank (sharded: pipeline
        stages have groups of their own) or, under DDP, the window's gradients by rank."""
        from .sharded import group_settings

        self._groups = self._grads_by_rank = None
        if self._sharded():
            groups = dist.all_gather_object(group_settings(self.wrapper.optimizer, self.model))
            self._groups = [g for rank in groups for g in rank]
        elif dist.get_world_size() > 1:
            grads = self.wrapper.accumulated_grads()
            local = None if grads is None else [None if g is None else g.cpu() for g in grads]
            gathered = dist.all_gather_object(local)
            self._grads_by_rank = None if all(g is None for g in gathered) else gathered

    def state_dict(self) -> dict:
        from .sharded import group_settings

        state = self.wrapper.state_dict()
        if self._sharded():  # the tensors are in the shards: the file says what is there
            grads = state.pop("accumulated_grads", None) is not None
            groups = self._groups
            if groups is None:  # not gathered: this process's own groups
                groups = group_settings(self.wrapper.optimizer, self.model)
            state.update(optimizer=None, grads_in_shards=grads, param_groups=groups)
        elif self._grads_by_rank is not None:
            state["accumulated_grads"] = self._grads_by_rank[0]
            state["accumulated_grads_by_rank"] = self._grads_by_rank
        self._groups = self._grads_by_rank = None  # one save's
        return state

    def load_state_dict(self, state: dict) -> None:
        """After the model (and, from a sharded checkpoint, the optimizer's shards) is loaded."""
        from .sharded import restore_group_settings

        state = dict(state)
        by_rank = state.pop("accumulated_grads_by_rank", None)
        if by_rank is not None and len(by_rank) == dist.get_world_size():
            state["accumulated_grads"] = by_rank[dist.get_rank()]  # each rank its own window
        self.wrapper.load_state_dict(state)
        if "optimizer" in state and state["optimizer"] is None:  # written with the shards
            restore_group_settings(self.wrapper.optimizer, state["param_groups"], self.model)
