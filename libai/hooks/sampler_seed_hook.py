"""DistSamplerSeedHook: gives the train sampler the epoch number, so each epoch shuffles anew."""

from __future__ import annotations

from typing import Any

from libai.registry import HOOKS

from .hook import Hook, RunnerView

__all__ = ["DistSamplerSeedHook"]


@HOOKS.register_module()
class DistSamplerSeedHook(Hook):
    """Call ``set_epoch(runner.epoch)`` on the train loader's sampler before every epoch.

    Both ``train_dataloader.sampler`` and ``train_dataloader.batch_sampler.sampler`` are tried
    (each at most once); a sampler without ``set_epoch`` is left alone. Without this call a
    seeded sampler would repeat the first epoch's order in every epoch.
    """

    priority = "NORMAL"

    def before_train_epoch(self, runner: RunnerView) -> None:
        loader = runner.train_loop.dataloader
        seen: list[Any] = []
        batch_sampler = getattr(loader, "batch_sampler", None)
        for sampler in (getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None)):
            if sampler is None or any(sampler is s for s in seen):
                continue
            seen.append(sampler)
            set_epoch = getattr(sampler, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(runner.epoch)
