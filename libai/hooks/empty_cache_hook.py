"""EmptyCacheHook: hands cached, unused accelerator memory back to the driver."""

from __future__ import annotations

from typing import Any

import torch

from libai.registry import HOOKS

from .hook import Hook, RunnerView

__all__ = ["EmptyCacheHook"]


@HOOKS.register_module()
class EmptyCacheHook(Hook):
    """Call ``torch.cuda.empty_cache()`` at the chosen points (a no-op without CUDA).

    Emptying the cache does not free memory that tensors use; it returns the allocator's cached
    blocks, which helps when another process shares the GPU or when fragmentation after
    validation makes the next train epoch run out of memory. It costs time (the next allocations
    go back to the driver), so ``after_iter=True`` is for debugging only.

    Args:
        before_epoch: Empty before every train/val/test epoch. Defaults to False.
        after_epoch: Empty after every train/val/test epoch. Defaults to True.
        after_iter: Empty after every train/val/test iteration. Defaults to False.
    """

    priority = "NORMAL"

    def __init__(
        self, before_epoch: bool = False, after_epoch: bool = True, after_iter: bool = False
    ) -> None:
        self.before_epoch = before_epoch
        self.after_epoch = after_epoch
        self.after_iter = after_iter

    @staticmethod
    def _empty() -> None:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _at_epoch_start(self, runner: RunnerView) -> None:
        if self.before_epoch:
            self._empty()

    def _at_epoch_end(self, runner: RunnerView, metrics: Any = None) -> None:
        if self.after_epoch:
            self._empty()

    def _at_iter_end(
        self, runner: RunnerView, batch_idx: int = 0, data_batch: Any = None, outputs: Any = None
    ) -> None:
        if self.after_iter:
            self._empty()

    before_train_epoch = before_val_epoch = before_test_epoch = _at_epoch_start
    after_train_epoch = after_val_epoch = after_test_epoch = _at_epoch_end
    after_train_iter = after_val_iter = after_test_iter = _at_iter_end
