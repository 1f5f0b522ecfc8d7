"""What the metrics that name classes share: where the names come from, zero_division, and
the check of a choice of one or more named values (averages, items, methods)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

__all__ = ["check_choices", "check_zero_division", "resolve_classes"]


def resolve_classes(
    owner: str, classes: Sequence[str] | None, meta: Mapping[str, Any] | None, required: bool
) -> tuple[str, ...] | None:
    """The class names: ``classes`` if given, else ``meta["classes"]``, else None.

    Args:
        owner: Who asks, for messages.
        classes: The metric's own ``classes`` argument.
        meta: The metric's ``dataset_meta``.
        required: Raise instead of returning None when neither names the classes.

    Raises:
        ConfigError: The names are not a non-empty sequence of distinct strings, or they are
            required and neither source has them.
    """
    source = "classes"
    if classes is None and meta is not None and meta.get("classes") is not None:
        classes, source = meta["classes"], "dataset_meta['classes']"
    if classes is None:
        if required:
            raise ConfigError(
                f"{owner} needs the class names: give classes=('O', 'B-PER', ...) in the metric "
                f"config, or evaluate on a dataset whose metainfo has 'classes' (the runner "
                f"hands it over as dataset_meta)."
            )
        return None
    if isinstance(classes, str) or not isinstance(classes, Sequence) or not classes:
        raise ConfigError(f"{owner}: {source} must be a non-empty list of names, got {classes!r}.")
    names = tuple(str(c) for c in classes)
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ConfigError(f"{owner}: {source} names {dup} more than once.")
    return names


def check_zero_division(owner: str, value: Any) -> float:
    """The ``zero_division`` argument as a float: 0.0, 1.0 or NaN (given as "nan" in a config)."""
    if value == "nan":
        return math.nan
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value in (0, 1) or math.isnan(value):
            return float(value)
    raise ConfigError(f"{owner}: zero_division must be 0.0, 1.0 or 'nan', got {value!r}.")


def check_choices(value: str | Sequence[str], allowed: Sequence[str], rule: str) -> tuple[str, ...]:
    """``value`` (one name, or a list of distinct ones among ``allowed``) as a tuple.

    Raises:
        ConfigError: ``rule`` (what ``value`` must be, e.g. "F1Score: average must be one of
            ..."), what was given, and the allowed name closest to the first unknown one.
    """
    chosen = (value,) if isinstance(value, str) else tuple(value)
    bad = [c for c in chosen if c not in allowed]
    if bad or not chosen or len(set(chosen)) != len(chosen):
        hint = did_you_mean(str(bad[0]), allowed) if bad else ""
        raise ConfigError(f"{rule}, got {value!r}.{hint}")
    return chosen
