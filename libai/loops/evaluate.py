"""Validation and test loops: one or several named data sets, each with its own evaluator."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from libai.registry import LOOPS
from libai.utils.dist import all_reduce_mean
from libai.utils.signals import StopRequested

from .base import BaseLoop

__all__ = ["ValLoop", "TestLoop", "metric_names_of"]


class _EvalLoop(BaseLoop):
    """Runs every named set through the model and its evaluator; ``stage`` is 'val' or 'test'.

    Args:
        runner: The runner.
        dataloader: One data loader, or a dict ``{name: dataloader}`` of several sets.
        evaluator: One evaluator (used for every set) or a dict ``{name: evaluator}``.
    """

    stage = "val"

    def __init__(self, runner: Any, dataloader: Any, evaluator: Any) -> None:
        super().__init__(runner, dataloader)
        if isinstance(dataloader, dict):
            evals = evaluator if isinstance(evaluator, dict) else dict.fromkeys(dataloader, evaluator)
            self.sets = {name: (loader, evals[name]) for name, loader in dataloader.items()}
        else:
            self.sets = {None: (dataloader, evaluator)}

    def run(self) -> dict[str, float]:
        runner, stage = self.runner, self.stage
        was_training = runner.model.training
        runner.call_hook(f"before_{stage}")
        runner.model.eval()
        metrics: dict[str, float] = {}
        for name, (loader, evaluator) in self.sets.items():
            metrics.update(self._run_set(name, loader, evaluator))
        runner.call_hook(f"after_{stage}", metrics=metrics)
        runner.model.train(was_training)
        return metrics

    def _run_set(self, name: str | None, loader: Any, evaluator: Any) -> dict[str, float]:
        runner, stage = self.runner, self.stage
        prefix = f"{stage}/{name}/" if name else f"{stage}/"
        runner.call_hook(f"before_{stage}_epoch")
        loss_sum, loss_count = None, 0  # batch losses weighted by the batch's size
        limit = runner.limit_batches(len(loader))
        stop = getattr(runner, "stop_request", None)  # set while training, polled per batch
        with torch.no_grad():
            for idx, batch in enumerate(loader):
                if idx >= limit:
                    break
                runner.call_hook(f"before_{stage}_iter", batch_idx=idx, data_batch=batch)
                outputs = runner.run_eval_step(batch)
                if isinstance(outputs, dict) and isinstance(outputs.get("loss"), torch.Tensor):
                    n = _batch_size(batch)
                    batch_loss = outputs["loss"].detach().float().mean() * n
                    loss_sum = batch_loss if loss_sum is None else loss_sum + batch_loss
                    loss_count += n
                evaluator.process(batch, outputs)
                runner.call_hook(f"after_{stage}_iter", batch_idx=idx, data_batch=batch, outputs=outputs)
                if stop is not None:
                    signum = stop.poll()
                    if signum:  # the training loop saves its iteration and redoes this later
                        _drop_partial_results(evaluator)
                        raise StopRequested(signum)
        size = len(loader.dataset) if limit >= len(loader) else None
        results = evaluator.evaluate(size) if size is not None else evaluator.evaluate(
            min(len(loader.dataset), limit * (loader.batch_size or 1) * runner.world_size)
        )
        metrics = {prefix + k: float(v) for k, v in results.items()}
        if loss_count:  # over all processes: the same value in any number of processes
            total = all_reduce_mean({"sum": loss_sum.item(), "count": float(loss_count)})
            metrics[prefix + "loss"] = total["sum"] / total["count"]
        runner.call_hook(f"after_{stage}_epoch", metrics=metrics)
        return metrics


def _batch_size(batch: Any) -> int:
    """The leading dimension of the batch's first tensor (1 when it has none)."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() else 1
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        for item in batch:
            if isinstance(item, (torch.Tensor, dict, list, tuple)):
                return _batch_size(item)
    return 1


def metric_names_of(loop: _EvalLoop, batches: int = 2) -> list[str]:
    """The names the loop's metrics produce, from ``batches`` batches of each set: no hook is
    called and nothing is logged (the runner looks up the metrics hooks watch before training)."""
    runner, names = loop.runner, []
    was_training = runner.model.training
    runner.model.eval()
    try:
        for name, (loader, evaluator) in loop.sets.items():
            count, has_loss = 0, False
            with torch.no_grad():
                for idx, batch in enumerate(loader):
                    if idx >= batches:
                        break
                    outputs = runner.run_eval_step(batch)
                    evaluator.process(batch, outputs)
                    count += len(next(iter(batch.values()))) if isinstance(batch, dict) else 1
                    has_loss = isinstance(outputs, dict) and isinstance(outputs.get("loss"),
                                                                        torch.Tensor)
            prefix = f"{loop.stage}/{name}/" if name else f"{loop.stage}/"
            with warnings.catch_warnings():  # fewer results than the set holds: on purpose
                warnings.simplefilter("ignore", RuntimeWarning)
                results = evaluator.evaluate(min(len(loader.dataset), count * runner.world_size))
            names += [prefix + k for k in results] + ([prefix + "loss"] if has_loss else [])
    finally:
        runner.model.train(was_training)
    return names


def _drop_partial_results(evaluator: Any) -> None:
    """A stopped evaluation leaves no half-filled metric behind for the next one."""
    for metric in getattr(evaluator, "metrics", ()):
        if isinstance(getattr(metric, "results", None), list):
            metric.results.clear()


@LOOPS.register_module()
class ValLoop(_EvalLoop):
    """Validation: metrics are prefixed ``val/`` (``val/<set>/`` for named sets)."""

    stage = "val"


@LOOPS.register_module()
class TestLoop(_EvalLoop):
    """Test: metrics are prefixed ``test/`` (``test/<set>/`` for named sets)."""

    stage = "test"
