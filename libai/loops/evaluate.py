"""Validation and test loops: one or several named data sets, each with its own evaluator."""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

import torch

from libai.model.steps import unwrap_model
from libai.registry import LOOPS
from libai.utils.dist import all_reduce_max, all_reduce_mean
from libai.utils.errors import ConfigError
from libai.utils.signals import StopRequested

from .base import BaseLoop, LoopRunner
from .eval_sample import class_coverage, spread_loader

__all__ = ["BatchLimit", "ValLoop", "TestLoop", "check_limit_batches", "metric_names_of"]

# An int: at most that many batches per set; a float in (0, 1]: that share of them, rounded up.
# (A named alias, not a plain annotation, so that the loop's own check words the error.)
BatchLimit = int | float
_logger = logging.getLogger("libai")


def check_limit_batches(value: Any, key: str) -> BatchLimit | None:
    """``value`` if it is a valid ``limit_batches`` (None, an int >= 1, a float in (0, 1]).

    Raises:
        ConfigError: anything else, naming ``key`` (e.g. ``val_cfg.limit_batches``).
    """
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, float) and 0 < value <= 1:
        return value
    raise ConfigError(
        f"{key}={value!r}: expected a whole number of batches >= 1 (e.g. 20: at most 20 batches "
        f"of each set) or a share in (0, 1] (e.g. 0.25: a quarter of them, rounded up); None "
        f"evaluates every batch.")


class _EvalLoop(BaseLoop):
    """Runs every named set through the model and its evaluator; ``stage`` is 'val' or 'test'.

    With ``limit_batches`` only that many batches of each set are evaluated, on every process
    alike, and the metrics cover just their samples: with ``shuffle=False``, the first samples of
    the set, or, for a dataset that says the classes of its samples (``get_cat_ids``), as many
    samples chosen by class (:mod:`libai.loops.eval_sample`: every class, in its share). The log
    says once per set how many batches run and, when the samples hold fewer classes than the
    dataset names, which are missing. ``--fast-dev-run`` then caps the count further.

    Args:
        runner: The runner.
        dataloader: One data loader, or a dict ``{name: dataloader}`` of several sets.
        evaluator: One evaluator (used for every set) or a dict ``{name: evaluator}``.
        limit_batches: At most this many batches per set (an int >= 1), or this share of them
            (a float in (0, 1], rounded up). Defaults to None: every batch.

    Raises:
        ConfigError: ``limit_batches`` is none of these.
    """

    stage = "val"

    def __init__(self, runner: LoopRunner, dataloader: Any, evaluator: Any,
                 limit_batches: BatchLimit | None = None) -> None:
        super().__init__(runner, dataloader)
        self.limit_batches = check_limit_batches(limit_batches, f"{self.stage}_cfg.limit_batches")
        self.num_batches: int | None = None  # batches the set being evaluated runs, per process
        self._announced: set[str | None] = set()
        self._spread: dict[str | None, Any] = {}  # per set: the loader of a limited evaluation
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

    def batches_to_run(self, available: int) -> int:
        """Of ``available`` batches (per process), how many an evaluation runs: ``limit_batches``
        first, then ``--fast-dev-run`` (``runner.limit_batches``)."""
        limit, count = self.limit_batches, available
        if isinstance(limit, float):  # the epsilon: 0.1 * 30 is 3.0000000000000004, not above 3
            count = max(1, math.ceil(limit * available - 1e-9)) if available else 0
        elif limit is not None:
            count = min(limit, available)
        return self.runner.limit_batches(count)

    def _announce(self, what: str, limit: int, most: int, dataset: Any, by_class: bool) -> None:
        """Once per set: the batches a limited evaluation reads, and the classes its samples hold
        when fewer than all (their metrics then leave the others out)."""
        coverage = class_coverage(dataset)
        held = missing = ""
        if coverage is not None:
            have, lack = coverage
            if by_class:
                held = f", {len(dataset):,} samples by class"
            if lack:
                missing = (f"its samples hold {len(have)} of {len(have) + len(lack)} classes "
                           f"(none of {', '.join(lack)}): the per-class and averaged metrics "
                           f"leave those out")
        if self.limit_batches is not None:
            _logger.info(f"{what}: {limit} of {most} batches (limit_batches={self.limit_batches})"
                         f"{held}" + (f"; {missing}" if missing else ""))
        elif missing:
            _logger.info(f"{what}: {missing}")

    def _run_set(self, name: str | None, loader: Any, evaluator: Any) -> dict[str, float]:
        runner, stage = self.runner, self.stage
        prefix = f"{stage}/{name}/" if name else f"{stage}/"
        # The evaluation samplers do not pad (runner.build_loader): each sample is seen once, and
        # the shares of the ranks differ by one sample at most, so one rank may have a batch less.
        # Every rank runs the same number of batches: the most any rank has, limited.
        own = len(loader)
        most = all_reduce_max(own)
        limit = self.num_batches = self.batches_to_run(most)
        asked, by_class = (limit, most), False
        if limit < most:  # a dataset that says its classes is sampled by class (eval_sample.py)
            spread = self._spread.get(name) or spread_loader(
                loader, limit * (loader.batch_size or 1) * runner.data_parallel.size,
                runner.data_parallel)
            if spread is not None:
                self._spread[name], loader, by_class = spread, spread, True
                own = len(loader)
                most = limit = self.num_batches = all_reduce_max(own)
        if name not in self._announced:
            self._announced.add(name)
            self._announce(prefix[:-1], *asked, loader.dataset, by_class)
        runner.call_hook(f"before_{stage}_epoch")
        loss_sums: dict[str, Any] = {}  # per loss term: its batch values weighted by their items
        stop = runner.stop_request  # set while training, polled per batch
        batches, last = iter(loader), None
        with torch.no_grad():
            for idx in range(limit):
                if idx >= own:  # this rank's share is done: its last batch again, the outputs
                    if last is not None:  # dropped, keeps a sharded model's collectives in step
                        runner.run_eval_step(last)
                    _poll(stop, evaluator)
                    continue
                batch = last = next(batches)
                runner.call_hook(f"before_{stage}_iter", batch_idx=idx, data_batch=batch)
                outputs = runner.run_eval_step(batch)
                _add_loss_terms(loss_sums, outputs, batch)
                _process(evaluator, batch, outputs, runner.model)
                runner.call_hook(f"after_{stage}_iter", batch_idx=idx, data_batch=batch, outputs=outputs)
                _poll(stop, evaluator)
        dp = runner.data_parallel
        # a partial pass: the first `limit` batches of every rank are full (a rank's last batch
        # can be short only if it is its `most`-th), so they hold limit x batch x shares samples
        size = len(loader.dataset) if limit >= most else min(
            len(loader.dataset), limit * (loader.batch_size or 1) * dp.size)
        results = evaluator.evaluate(size, data_parallel=dp)
        metrics = {prefix + k: float(v) for k, v in results.items()}
        # for the log line: how many samples the metrics counted (the set's size: each once)
        runner.message_hub.update_info("eval_samples", evaluator.num_samples)
        if loss_sums:  # over all processes (replicas add the same sums and counts to both)
            total = all_reduce_mean({f"{k}/{i}": float(v) for k, pair in loss_sums.items()
                                     for i, v in enumerate(pair)})
            metrics[prefix + "loss"] = sum(total[f"{k}/0"] / total[f"{k}/1"] for k in loss_sums)
        runner.call_hook(f"after_{stage}_epoch", metrics=metrics)
        return metrics


def _poll(stop: Any, evaluator: Any) -> None:
    """A stop signal on any rank (one all-reduce) ends the evaluation; the training loop saves its
    iteration and redoes the evaluation after the resume."""
    if stop is not None:
        signum = stop.poll()
        if signum:
            _drop_partial_results(evaluator)
            raise StopRequested(signum)


def _add_loss_terms(sums: dict[str, Any], outputs: Any, batch: Any) -> None:
    """Add a batch's losses to ``sums`` ({term: [value x weight, weight]}).

    The evaluation loss is the mean over the whole set, the same for any batching and any
    number of processes: each batch's ``loss`` weighs by its samples; a model that says what its
    losses are means over (``num_items``, libai.model.contract) gets each term weighed by its
    own items, and the loss is their sum (BERT: masked-LM mean over the masked tokens + NSP
    mean over the samples).
    """
    if not isinstance(outputs, dict):
        return
    items = outputs.get("num_items")
    if isinstance(items, dict):
        terms = {k: v for k, v in outputs.items() if "loss" in k and k != "loss"
                 and isinstance(v, torch.Tensor)} or {"loss": outputs.get("loss")}
    else:
        items, terms = {}, {"loss": outputs.get("loss")}
    for key, value in terms.items():
        if not isinstance(value, torch.Tensor):
            continue
        weight = items.get(key)
        weight = _batch_size(batch) if weight is None else weight.detach().double()
        pair = sums.setdefault(key, [0.0, 0.0])
        pair[0] = pair[0] + value.detach().double().mean() * weight
        pair[1] = pair[1] + weight


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


def _process(evaluator: Any, batch: Any, outputs: Any, model: Any) -> None:
    """``evaluator.process``; a key the metrics miss in the outputs gets the model's reason, when
    a setting of the model turned that output off (``why_no_output``, libai.model.contract)."""
    try:
        evaluator.process(batch, outputs)
    except ConfigError as e:
        why = getattr(unwrap_model(model), "why_no_output", None)
        reason = why(e.missing_key) if why is not None and hasattr(e, "missing_key") else None
        if not reason:
            raise
        raise ConfigError(f"{e} {reason}") from None


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
                    _process(evaluator, batch, outputs, runner.model)
                    count += len(next(iter(batch.values()))) if isinstance(batch, dict) else 1
                    has_loss = isinstance(outputs, dict) and isinstance(outputs.get("loss"),
                                                                        torch.Tensor)
            prefix = f"{loop.stage}/{name}/" if name else f"{loop.stage}/"
            with warnings.catch_warnings():  # fewer results than the set holds: on purpose
                warnings.simplefilter("ignore", RuntimeWarning)
                results = evaluator.evaluate(min(len(loader.dataset), count * runner.data_parallel.size),
                                             data_parallel=runner.data_parallel)
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
