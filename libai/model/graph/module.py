"""GraphModule: the model in graph mode, as the runner trains and evaluates it."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .mode import GraphMode

__all__ = ["GraphModule"]


class GraphModule(nn.Module):
    """The model in graph mode: ``torch.compile(module)`` through a :class:`GraphMode`, which
    keeps the eager module at hand. Its forward is the GraphMode's; the rest are views of it.

    Args:
        module: The model, or its DDP wrapper.
        compile: ``torch.compile`` keyword arguments (see :func:`compile_options`).
        on_failure: "eager" (warn once and continue eager) or "raise". Defaults to "eager".
        blocks: Compile these modules' forwards, and nothing else, instead of the whole
            model (regional compilation: the way of every transformer, the runner passes its
            ``parallel_blocks``): blocks of one class share one compiled graph, so a cold
            compile costs one block, not the model; the rest of the model, its loss and a
            sharded model's hooks (all-gathers, reshards) run eager between the compiled
            blocks. The state dict keys do not change. Defaults to None: the whole model.
        unwrapped: The model inside ``module``'s DDP wrapper (what the parity check copies and
            the messages name). Defaults to None: ``module`` itself.
    """

    def __init__(self, module: nn.Module, compile: dict | None = None, on_failure: str = "eager",
                 blocks: list[nn.Module] | None = None, unwrapped: nn.Module | None = None) -> None:
        super().__init__()
        graph_mode = GraphMode(compile, on_failure)
        self._orig_mod = module
        self.graph_mode = graph_mode
        graph_mode.compile_model(module, blocks, unwrapped)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)  # e.g. DDP's no_sync

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.graph_mode.forward(self.training and torch.is_grad_enabled(), args, kwargs)

    # views of the GraphMode, for the runner's log and for tests
    @property
    def eager(self) -> bool:
        return self.graph_mode.eager

    @property
    def train_calls(self) -> int:
        return self.graph_mode.train_calls

    @property
    def training_recompiles(self) -> int:
        return self.graph_mode.training_recompiles

    @property
    def compile_seconds(self) -> dict[str, float]:
        return self.graph_mode.compile_seconds

    @property
    def unwrapped(self) -> nn.Module:
        return self.graph_mode.unwrapped

    def recompiles(self) -> list[str]:
        return self.graph_mode.recompiles()

    def report(self, final: bool = False) -> str:
        return self.graph_mode.report(final)
