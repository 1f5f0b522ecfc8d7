"""A histogram of a tensor's finite values, as the log backends write it (TensorBoard's
HistogramProto, wandb, MLflow): the counts are computed on the tensor's device and only they and
a few statistics reach the host."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Histogram"]


@dataclass
class Histogram:
    """Equal-width buckets of the finite values of a tensor (non-finite values are left out).

    Attributes:
        counts: Values per bucket.
        edges: Bucket edges, one more than ``counts``; ``edges[0] == min`` and
            ``edges[-1] == max`` except for constant values (then ``min - 0.5 .. max + 0.5``).
        min, max, num, sum, sum_squares: Of the finite values.
    """

    counts: list[float]
    edges: list[float]
    min: float
    max: float
    num: int
    sum: float
    sum_squares: float

    @classmethod
    def of(cls, values: Any, bins: int = 64) -> Histogram | None:
        """Bucket ``values`` (a tensor, computed on its device; or anything ``torch.as_tensor``
        takes). Returns None when there is no finite value."""
        import torch

        if isinstance(values, Histogram):
            return values
        t = values.detach() if isinstance(values, torch.Tensor) else torch.as_tensor(values)
        t = t.flatten()
        t = t.double() if t.dtype == torch.float64 else t.float()
        finite = torch.isfinite(t)
        if not bool(finite.all()):
            t = t[finite]
        if t.numel() == 0:
            return None
        lo_t, hi_t = torch.aminmax(t)
        lo, hi, total, squares = torch.stack([lo_t, hi_t, t.sum(), torch.dot(t, t)]).tolist()
        left, right = (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)
        counts = _bucket_counts(t, bins, left, right).tolist()
        edges = [left + (right - left) * i / bins for i in range(bins)] + [right]
        return cls(counts, edges, lo, hi, t.numel(), total, squares)


def _bucket_counts(t: Any, bins: int, left: float, right: float) -> Any:
    """``torch.histc(t, bins, left, right)``. CUDA has no deterministic histc: under
    ``randomness.deterministic`` (``torch.use_deterministic_algorithms``) it raises, so there the
    buckets are counted with ``bincount``, which has one, and a histogram never ends a run."""
    import torch

    if not (t.is_cuda and torch.are_deterministic_algorithms_enabled()):
        return torch.histc(t, bins=bins, min=left, max=right)
    return _bincount_buckets(t, bins, left, right)


def _bincount_buckets(t: Any, bins: int, left: float, right: float) -> Any:
    """The counts ``histc`` gives (the last bucket includes ``right``), by ``bincount``."""
    import torch

    index = ((t - left) * (bins / (right - left))).floor().clamp_(0, bins - 1).long()
    return torch.bincount(index, minlength=bins).to(t.dtype)
