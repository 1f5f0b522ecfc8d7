"""Evaluator: runs several metrics over the same batches and merges their results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from libai.registry import EVALUATORS, METRICS
from libai.utils.dist import DataParallel
from libai.utils.errors import ConfigError, RegistryError

from .base_metric import BaseMetric

__all__ = ["Evaluator", "build_evaluator"]

MetricLike = BaseMetric | Mapping[str, Any]


def _build_metric(cfg: Any, index: int, path: str | None = None) -> BaseMetric:
    if isinstance(cfg, Mapping):
        return METRICS.build(cfg, path=path)
    if callable(getattr(cfg, "process", None)) and callable(getattr(cfg, "evaluate", None)):
        return cfg
    raise ConfigError(
        f"Evaluator: metrics[{index}] must be a metric config dict (with 'type') or a "
        f"BaseMetric instance, got {type(cfg).__name__} {cfg!r}."
    )


@EVALUATORS.register_module()
class Evaluator:
    """Feeds each batch to every metric, and merges the metrics' results into one dict.

    Config: ``val_evaluator = dict(type="Evaluator", metrics=[dict(type="Accuracy",
    topk=(1, 5)), dict(type="AUC")])``; a metric dict or a list of them is accepted directly
    where an evaluator is expected (see :func:`build_evaluator`).

    Args:
        metrics: One metric or a list of them; each a config dict built from ``METRICS`` or a
            :class:`BaseMetric` instance.
    """

    def __init__(self, metrics: MetricLike | Sequence[MetricLike]) -> None:
        if isinstance(metrics, (Mapping, BaseMetric)):
            metrics = [metrics]
        if not isinstance(metrics, Sequence) or isinstance(metrics, str):
            raise ConfigError(
                f"Evaluator: metrics must be a metric (dict or BaseMetric) or a list of them, "
                f"got {type(metrics).__name__}."
            )
        if not metrics:
            raise ConfigError("Evaluator: metrics is empty; give at least one metric.")
        self.metrics: list[BaseMetric] = [_build_metric(m, i) for i, m in enumerate(metrics)]
        self._dataset_meta: dict[str, Any] | None = None

    @property
    def dataset_meta(self) -> dict[str, Any] | None:
        """The evaluated dataset's metainfo; setting it hands it to every metric.

        The runner sets it from the evaluation loader's ``dataset.metainfo``, so that metrics
        naming classes (per-class F1, entity F1) find ``dataset_meta["classes"]``.
        """
        return self._dataset_meta

    @dataset_meta.setter
    def dataset_meta(self, meta: Mapping[str, Any] | None) -> None:
        if meta is not None and not isinstance(meta, Mapping):
            raise ConfigError(
                f"Evaluator.dataset_meta must be a dict such as {{'classes': ('neg', 'pos')}} "
                f"or None, got {type(meta).__name__}."
            )
        self._dataset_meta = None if meta is None else dict(meta)
        for metric in self.metrics:
            metric.dataset_meta = self._dataset_meta

    def process(self, batch: Any, outputs: Any) -> None:
        """Give one batch and the model's eval-mode outputs for it to every metric.

        Args:
            batch: The collated batch.
            outputs: What the model returned for it.
        """
        for metric in self.metrics:
            metric.process(batch, outputs)

    def evaluate(self, size: int, data_parallel: DataParallel | None = None) -> dict[str, float]:
        """Evaluate every metric on the whole dataset; every rank must call this.

        Args:
            size: The number of samples in the dataset (the sampler's padding is dropped).
            data_parallel: How the processes split the data (see :meth:`BaseMetric.evaluate`).
                Defaults to None: every process read a share of its own.

        Returns:
            All metrics' values in one dict, identical on every rank.

        Raises:
            ConfigError: Two metrics return the same key.
        """
        merged: dict[str, float] = {}
        owner: dict[str, int] = {}
        for i, metric in enumerate(self.metrics):
            results = (metric.evaluate(size, data_parallel=data_parallel)
                       if isinstance(metric, BaseMetric) else metric.evaluate(size))
            for key, value in results.items():
                if key in merged:
                    j = owner[key]
                    raise ConfigError(
                        f"Evaluator: metrics[{j}] ({type(self.metrics[j]).__name__}) and "
                        f"metrics[{i}] ({type(metric).__name__}) both report '{key}'. Give one "
                        f"of them a prefix, e.g. dict(type='{type(metric).__name__}', "
                        f"prefix='{type(metric).__name__.lower()}{i}', ...)."
                    )
                merged[key] = value
                owner[key] = i
        return merged

    @property
    def num_samples(self) -> int | None:
        """The samples the last :meth:`evaluate` counted (None before one, or when no metric
        says): the data set's size when every sample was counted once."""
        counts = [m.num_samples for m in self.metrics if getattr(m, "num_samples", None) is not None]
        return min(counts) if counts else None

    def __repr__(self) -> str:
        return f"Evaluator(metrics={self.metrics!r})"


def _is_evaluator_type(type_: Any) -> bool:
    if isinstance(type_, type):
        return issubclass(type_, Evaluator)
    try:
        obj = EVALUATORS.get(type_)
    except RegistryError:
        return False
    if isinstance(obj, type):
        return issubclass(obj, Evaluator)
    return type_ in EVALUATORS  # a registered factory function


def build_evaluator(cfg: Evaluator | MetricLike | Sequence[MetricLike],
                    path: str | None = None) -> Evaluator:
    """Build an evaluator from what a config may hold under ``val_evaluator``.

    Args:
        cfg: An :class:`Evaluator` (returned as is); a dict whose ``type`` is in
            ``EVALUATORS`` (built from it); a metric dict, a :class:`BaseMetric` or a list of
            those (wrapped in an :class:`Evaluator`).
        path: Its config path (``val_evaluator``), for messages. Defaults to None.

    Returns:
        The evaluator.
    """
    if isinstance(cfg, Evaluator):
        return cfg
    if isinstance(cfg, Mapping) and "type" in cfg and _is_evaluator_type(cfg["type"]):
        return EVALUATORS.build(cfg, path=path)
    if path is not None and isinstance(cfg, Mapping):
        cfg = _build_metric(cfg, 0, path)
    elif path is not None and isinstance(cfg, Sequence) and not isinstance(cfg, str):
        cfg = [_build_metric(m, i, f"{path}.{i}") for i, m in enumerate(cfg)]
    if cfg is None:
        raise ConfigError(
            "build_evaluator: got None; give a metric dict, a list of metric dicts or an "
            "evaluator dict such as dict(type='Evaluator', metrics=[dict(type='Accuracy')])."
        )
    return Evaluator(cfg)
