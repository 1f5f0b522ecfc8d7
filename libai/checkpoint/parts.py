"""The parts a :class:`~libai.checkpoint.Checkpointer` saves: anything with ``state_dict()`` and
``load_state_dict(state)``, and two adapters that make a list of such objects one part."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["HookStates", "StateList", "Stateful"]


class Stateful(Protocol):
    """What a part of a checkpoint provides (the same protocol as ``torch.distributed.checkpoint``)."""

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
