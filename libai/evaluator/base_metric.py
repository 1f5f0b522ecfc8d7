"""The metric contract: per-sample results collected on every rank, reduced once on rank 0.

A metric sees the validation set one batch at a time and keeps a small record per sample; at the
end the records of all ranks are put back in dataset order and reduced to a dict of floats::

    metric.results = []
    for batch in loader:                          # this rank's share of the dataset
        outputs = model(batch)                    # eval mode
        metric.process(batch, outputs)            # appends len(batch) entries, cheap
    scores = metric.evaluate(len(dataset))        # gather + reorder + drop padding
                                                  # -> compute_metrics on rank 0 -> broadcast

Cost rule: ``process`` runs on every validation iteration. Move each batch to the host once
(one ``.cpu()`` per tensor), work on whole arrays, and store what the reduction needs, not the
raw model output (top-k hits rather than logits over a vocabulary).
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from libai.utils import dist as dist_utils
from libai.utils.errors import ConfigError, DataError, LibaiError
from libai.utils.suggest import did_you_mean

__all__ = ["BaseMetric", "lookup_key", "nan_with_warning", "to_numpy"]



def to_numpy(value: Any) -> np.ndarray:
    """Convert a tensor, array, list or scalar to a numpy array on the host.

    Tensors are detached and copied to the CPU in one transfer; half-precision floats
    (float16, bfloat16) are widened to float32 first, since numpy has no bfloat16.

    Args:
        value: What to convert.

    Returns:
        A numpy array (a 0-d array for a scalar).
    """
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype in (torch.float16, torch.bfloat16):
            value = value.float()
        return value.cpu().numpy()
    return np.asarray(value)


def _describe_keys(container: Any) -> tuple[str, list[str]]:
    if isinstance(container, Mapping):
        keys = [str(k) for k in container]
        return "keys: " + (", ".join(f"'{k}'" for k in keys) or "none"), keys
    return f"not a dict but a {type(container).__name__}", []


def lookup_key(
    key: str, batch: Any, outputs: Any, *, owner: str = "metric", arg: str = "key"
) -> Any:
    """Find ``key`` in the model outputs first, then in the batch.

    Args:
        key: The name to look up.
        batch: The collated batch (usually a dict).
        outputs: What the model returned in eval mode (usually a dict).
        owner: Who asks, for the error message. Defaults to "metric".
        arg: The argument that holds ``key`` (``"label_key"``), for the error message.
            Defaults to "key".

    Returns:
        The value stored under ``key``.

    Raises:
        ConfigError: ``key`` is in neither; lists the keys of both and the closest names.
    """
    for container in (outputs, batch):
        if isinstance(container, Mapping) and key in container:
            return container[key]
    out_desc, out_keys = _describe_keys(outputs)
    batch_desc, batch_keys = _describe_keys(batch)
    hint = did_you_mean(key, dict.fromkeys(out_keys + batch_keys))
    error = ConfigError(
        f"{owner}: {arg}='{key}' is neither in the model outputs ({out_desc}) nor in the batch "
        f"({batch_desc}).{hint} Set {arg} in the metric config to the key that holds it, or make "
        f"the model return '{key}' in eval mode."
    )
    error.missing_key = key  # the evaluation loop asks the model why (``why_no_output``)
    raise error


def _interleave(per_rank: Sequence[Sequence[Any]]) -> list[Any]:
    """Undo the sampler's split: rank r got positions r, r+W, r+2W, ... of the index list."""
    longest = max((len(part) for part in per_rank), default=0)
    merged: list[Any] = []
    for i in range(longest):
        for part in per_rank:
            if i < len(part):
                merged.append(part[i])
    return merged


def _as_float(value: Any) -> Any:
    """Plain Python floats for numpy and 0-d tensor scalars; anything else is kept as is."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    if isinstance(value, (np.generic, int, float)) and not isinstance(value, bool):
        return float(value)
    return value


class _RemoteFailure:
    """Sent from rank 0 instead of the metrics when computing them failed there."""

    def __init__(self, message: str) -> None:
        self.message = message


class BaseMetric(ABC):
    """Base class of metrics: subclasses implement ``process`` and ``compute_metrics``.

    ``process`` appends exactly one entry per sample to ``self.results`` (a small picklable value,
    e.g. a tuple of floats); ``compute_metrics`` turns the entries of the whole dataset, in
    dataset order, into ``{name: float}``. :meth:`evaluate` does the distributed part.

    ``dataset_meta`` is the evaluated dataset's ``metainfo`` (e.g. ``{"classes": (...)}``),
    set by the runner through :attr:`Evaluator.dataset_meta`; None until then. Metrics that name
    classes read ``dataset_meta["classes"]`` when they are not given class names themselves.

    Args:
        prefix: Put in front of every key as ``"{prefix}/{key}"``. Defaults to None, which uses
            the class attribute ``default_prefix``; pass ``""`` for no prefix at all.
    """

    #: Prefix used when the ``prefix`` argument is None. None means no prefix.
    default_prefix: str | None = None

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = self.default_prefix if prefix is None else prefix
        self.results: list[Any] = []
        self.num_samples: int | None = None  # results counted by the last evaluate()
        self._dataset_meta: dict[str, Any] | None = None

    @property
    def dataset_meta(self) -> dict[str, Any] | None:
        """The evaluated dataset's metainfo (a dict), or None when nobody set it."""
        return getattr(self, "_dataset_meta", None)  # None too if a subclass skipped __init__

    @dataset_meta.setter
    def dataset_meta(self, meta: Mapping[str, Any] | None) -> None:
        if meta is not None and not isinstance(meta, Mapping):
            raise ConfigError(
                f"{self.name}.dataset_meta must be a dict such as {{'classes': ('neg', 'pos')}} "
                f"or None, got {type(meta).__name__}."
            )
        self._dataset_meta = None if meta is None else dict(meta)

    @property
    def name(self) -> str:
        """The class name, used in messages."""
        return type(self).__name__

    def fetch(self, key: str, batch: Any, outputs: Any, arg: str = "key") -> Any:
        """:func:`lookup_key` with this metric's name in the error message."""
        return lookup_key(key, batch, outputs, owner=self.name, arg=arg)

    def fetch_pred(self, key: str, batch: Any, outputs: Any, arg: str = "pred_key") -> Any:
        """The prediction: ``outputs`` itself when it is a tensor or array, else looked up."""
        if isinstance(outputs, (torch.Tensor, np.ndarray)):
            return outputs
        return self.fetch(key, batch, outputs, arg=arg)

    @abstractmethod
    def process(self, batch: Any, outputs: Any) -> None:
        """Append one entry per sample of ``batch`` to ``self.results``.

        Args:
            batch: The collated batch, usually a dict of tensors.
            outputs: What the model returned in eval mode: a dict, or a tensor holding the
                prediction.
        """

    @abstractmethod
    def compute_metrics(self, results: list[Any]) -> dict[str, float]:
        """Reduce the entries of the whole dataset, in dataset order, to named floats.

        Args:
            results: One entry per sample, as appended by :meth:`process`.

        Returns:
            Metric names (without the prefix) to values.
        """

    def evaluate(self, size: int,
                 data_parallel: dist_utils.DataParallel | None = None) -> dict[str, float]:
        """Gather every data share's results, compute the metrics on rank 0, and share them.

        Every rank must call this (it runs collectives). The results are put back in the order
        of the sampler's padded index list and cut to ``size``, which drops the samples the
        sampler repeated to give every rank the same number. ``self.results`` is cleared and
        :attr:`num_samples` says how many results were counted.

        Args:
            size: The number of samples in the dataset.
            data_parallel: How the processes split the data (the runner's
                :class:`~libai.utils.dist.DataParallel`). Of the processes that read the same
                share (tensor-parallel peers) only the first one's results count. Defaults to
                None: every process read a share of its own.

        Returns:
            The same dict on every rank, keys prefixed with ``"{prefix}/"`` if a prefix is set.
        """
        dp = data_parallel or dist_utils.DataParallel.world()
        world_size = dist_utils.get_world_size()
        gathered = self._gather(dp, world_size)
        merged = _interleave(gathered)
        self._check_count(len(merged), size, len(gathered))
        merged = merged[:size]
        self.num_samples = len(merged)

        if dist_utils.get_rank() == 0:
            try:
                payload: Any = self._compute(merged)
            except Exception as e:
                if world_size > 1:  # the other ranks wait for the broadcast: do not leave them
                    dist_utils.broadcast_object(_RemoteFailure(f"{type(e).__name__}: {e}"))
                raise
        else:
            payload = None
        if world_size > 1:
            payload = dist_utils.broadcast_object(payload)
        if isinstance(payload, _RemoteFailure):
            raise LibaiError(
                f"{self.name}: computing the metrics failed on rank 0 ({payload.message})"
            )
        return payload

    def _gather(self, dp: dist_utils.DataParallel, world_size: int) -> list[list[Any]]:
        """Every share's results, by data-parallel rank (one list per share); clears mine."""
        mine, self.results = self.results, []
        if world_size == 1:
            return [mine]
        # replicas of a share send nothing: one copy of each share crosses the wire
        gathered = dist_utils.all_gather_object((dp.rank, mine if dp.replica == 0 else None))
        shares: list[Any] = [None] * dp.size
        for rank, results in gathered:
            if results is not None:
                shares[rank] = results
        if any(share is None for share in shares):
            raise DataError(f"{self.name}: no results from data-parallel rank(s) "
                            f"{[r for r, s in enumerate(shares) if s is None]} of {dp.size}.")
        return shares

    def _compute(self, results: list[Any]) -> dict[str, float]:
        metrics = self.compute_metrics(results)
        if not isinstance(metrics, Mapping):
            raise TypeError(
                f"{self.name}.compute_metrics must return a dict of name -> float, got "
                f"{type(metrics).__name__}."
            )
        out = {}
        for key, value in metrics.items():
            full = f"{self.prefix}/{key}" if self.prefix else str(key)
            out[full] = _as_float(value)
        return out

    def _check_count(self, received: int, size: int, world_size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError(f"{self.name}.evaluate: size must be an int >= 0, got {size!r}.")
        if received < size:
            warnings.warn(
                f"{self.name} received {received} results for a dataset of {size} samples; the "
                f"metrics are computed on those {received}. Make sure the validation loader does "
                f"not drop the last batch and that process() appends one entry per sample.",
                RuntimeWarning,
                stacklevel=3,
            )
        elif received - size >= world_size:
            # The sampler pads by fewer than world_size samples; more means the contract broke.
            raise DataError(
                f"{self.name} received {received} results for a dataset of {size} samples on "
                f"{world_size} rank(s). process() must append exactly one entry per sample, and "
                f"each rank must see only its own share of the dataset (use the distributed "
                f"sampler for the validation loader)."
            )

    def __repr__(self) -> str:
        return f"{self.name}(prefix={self.prefix!r}, results={len(self.results)})"


def nan_with_warning(metric: str, reason: str) -> float:
    """Warn that ``metric`` is undefined for ``reason`` and return NaN."""
    warnings.warn(f"{metric} is undefined ({reason}); reporting NaN.", RuntimeWarning, stacklevel=3)
    return math.nan
