"""Dump the model's test outputs, one entry per sample, for ``tools/test.py --dump``."""

from __future__ import annotations

import json
import os
from typing import Any

import torch

from libai.registry import HOOKS
from libai.utils import dist
from libai.utils.errors import ConfigError
from libai.utils.paths import check_output_path

from .hook import Hook, RunnerView

__all__ = ["DumpPredictionsHook"]


def _split(outputs: Any) -> dict[str, torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return {"outputs": outputs.detach().cpu()}
    if isinstance(outputs, dict):
        return {k: v.detach().cpu() for k, v in outputs.items() if isinstance(v, torch.Tensor) and v.dim() > 0}
    raise ConfigError(f"DumpPredictionsHook: cannot dump outputs of type {type(outputs).__name__}; "
                      f"the model should return a tensor or a dict of tensors in eval mode.")


@HOOKS.register_module()
class DumpPredictionsHook(Hook):
    """Save the test outputs (and labels, when the batch has them) in data set order.

    ``.pt`` files hold ``{key: tensor (N, ...)}``; ``.jsonl`` files hold one JSON object per
    sample. Under several processes the outputs are gathered and the sampler's padding dropped.

    Args:
        path: Output file; its extension picks the format (``.pt`` or ``.jsonl``).
        label_key: Batch entry saved next to the outputs when present. Defaults to 'labels'.
    """

    priority = "LOW"

    def __init__(self, path: str, label_key: str = "labels") -> None:
        check_output_path(path, "DumpPredictionsHook.path")  # before the evaluation, not after
        if os.path.splitext(path)[1] not in (".pt", ".jsonl"):
            raise ConfigError(f"DumpPredictionsHook: '{path}' must end in .pt or .jsonl.")
        self.path = path
        self.label_key = label_key
        self._chunks: list[dict[str, torch.Tensor]] = []
        self._sets: list[dict[str, torch.Tensor]] = []

    def before_test(self, runner: RunnerView) -> None:
        self._sets: list[dict[str, torch.Tensor]] = []

    def before_test_epoch(self, runner: RunnerView) -> None:
        self._chunks = []

    def after_test_iter(self, runner: RunnerView, batch_idx: int, data_batch: Any, outputs: Any) -> None:
        chunk = _split(outputs)
        if isinstance(data_batch, dict) and isinstance(data_batch.get(self.label_key), torch.Tensor):
            chunk[self.label_key] = data_batch[self.label_key].detach().cpu()
        self._chunks.append(chunk)

    def after_test_epoch(self, runner: RunnerView, metrics: dict) -> None:
        keys = self._chunks[0] if self._chunks else {}
        local = {k: torch.cat([c[k] for c in self._chunks]) for k in keys}
        gathered = dist.all_gather_object(local)
        loaders = [loader for loader, _ in runner.test_loop.sets.values()]
        size = len(loaders[len(self._sets)].dataset)
        merged = {}
        for key in local:
            parts = [g[key] for g in gathered]
            n = min(len(p) for p in parts)
            # rank r holds samples r, r+W, r+2W, ...: interleave to restore data set order,
            # then drop the sampler's padding
            merged[key] = torch.stack([p[:n] for p in parts], dim=1).flatten(0, 1)[:size]
        self._sets.append(merged)

    def after_test(self, runner: RunnerView, metrics: dict) -> None:
        if not dist.is_main_process() or not self._sets:
            return
        merged = {k: torch.cat([s[k] for s in self._sets]) for k in self._sets[0]}
        total = len(next(iter(merged.values()))) if merged else 0
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        if self.path.endswith(".pt"):
            torch.save(merged, self.path)
        else:
            with open(self.path, "w") as f:
                for i in range(total):
                    f.write(json.dumps({k: v[i].tolist() for k, v in merged.items()}) + "\n")
        runner.logger.info(f"Dumped {total} test predictions to {self.path}")
