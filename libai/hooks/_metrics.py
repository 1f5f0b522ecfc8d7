"""Helpers shared by the hooks that watch a validation metric (CheckpointHook, EarlyStoppingHook)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["RULES", "infer_rule", "check_rule", "improved", "lookup_metric"]

RULES = ("greater", "less")

# Matched against the lower-cased last component of the metric name; "less" is tried first so
# that "top1_error" is read as an error, not as a top-k accuracy.
_LESS_WORDS = (
    "loss",
    "error",
    "err",
    "perplexity",
    "ppl",
    "mse",
    "mae",
    "rmse",
    "nll",
    "wer",
    "cer",
)
_GREATER_WORDS = (
    "acc",
    "precision",
    "recall",
    "f1",
    "map",
    "auc",
    "iou",
    "dice",
    "bleu",
    "rouge",
    "top",
    "psnr",
    "ssim",
    "score",
    "r2",
    "mcc",
    "matthews",
    "pearson",
    "spearman",
    "match",
)


def check_rule(rule: str | None, where: str) -> str | None:
    """Validate a user-given ``rule`` ('greater', 'less' or None)."""
    if rule is None or rule in RULES:
        return rule
    raise ConfigError(
        f"{where}: rule must be 'greater' (higher is better), 'less' (lower is better) or None "
        f"(inferred from the metric name), got {rule!r}.{did_you_mean(str(rule), RULES)}"
    )


def infer_rule(metric: str, where: str) -> str:
    """'less' for loss-like names, 'greater' for accuracy-like names; ConfigError otherwise."""
    # the last part of the key that names a kind decides: val/f1/macro and val/f1/PER are f1's
    for part in reversed(metric.lower().split("/")):
        if any(w in part for w in _LESS_WORDS):
            return "less"
        if any(w in part for w in _GREATER_WORDS):
            return "greater"
    raise ConfigError(
        f"{where}: cannot tell whether a higher or a lower '{metric}' is better. "
        f"Set rule='greater' or rule='less' next to it in the config."
    )


def improved(score: float, best: float | None, rule: str, min_delta: float = 0.0) -> bool:
    """Whether ``score`` beats ``best`` by more than ``min_delta``; NaN never improves."""
    if math.isnan(score):
        return False
    if best is None:
        return True
    if rule == "greater":
        return score > best + min_delta
    return score < best - min_delta


def lookup_metric(metrics: Mapping[str, float], name: str, where: str) -> float:
    """``metrics[name]`` as a float, or a ConfigError listing the metrics that do exist."""
    if name in metrics:
        return float(metrics[name])
    available = ", ".join(sorted(metrics)) or "none (did the validation loop run an evaluator?)"
    raise ConfigError(
        f"{where}: metric '{name}' is not among the validation metrics."
        f"{did_you_mean(name, list(metrics))} Available: {available}. Metric names carry the "
        f"prefix of their validation set, e.g. 'val/accuracy'."
    )
