"""The losses of the classification heads, with Hugging Face's ``problem_type`` and its rule.

Hugging Face's ``*ForSequenceClassification`` models pick their loss from
``config.problem_type``; when it is unset, from the labels: one class means regression, integer
labels single-label classification, anything else (float (B, C) 0/1 targets) multi-label. The
heads of the zoo (``bert_heads.py``, ``gpt.py``) do the same, so a model trained here and its
exported twin compute the same loss.

=============================== ========================= ==================================
problem_type                    labels                    loss
=============================== ========================= ==================================
"single_label_classification"   (B,) long class ids       cross-entropy (-100 ignored)
"regression"                    (B,) float (C = 1)        MSE of the logits squeezed to (B,)
"multi_label_classification"    (B, C) float 0/1          binary cross-entropy with logits
=============================== ========================= ==================================
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from libai.utils.errors import ConfigError, DataError
from libai.utils.suggest import did_you_mean

__all__ = ["PROBLEM_TYPES", "check_problem_type", "classification_loss", "problem_type_for"]

PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


def check_problem_type(problem_type: str | None, num_classes: int, owner: str) -> None:
    """Refuse an unknown ``problem_type`` or a class count below 1, in one line.

    Raises:
        ConfigError: naming the field and the values it takes.
    """
    if problem_type is not None and problem_type not in PROBLEM_TYPES:
        raise ConfigError(
            f"{owner}: model.problem_type={problem_type!r} is unknown; use None (from the "
            f"labels, as Hugging Face does) or one of {', '.join(map(repr, PROBLEM_TYPES))}."
            f"{did_you_mean(str(problem_type), PROBLEM_TYPES)}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError(f"{owner}: model.num_classes must be a positive int (1 for "
                          f"regression), got {num_classes!r}")


def problem_type_for(problem_type: str | None, num_classes: int,
                     labels: torch.Tensor) -> str:
    """The problem type a batch is scored as: ``problem_type`` when set, else Hugging Face's rule
    (one class: regression; integer labels: single-label; otherwise multi-label)."""
    if problem_type is not None:
        return problem_type
    if num_classes == 1:
        return "regression"
    if not labels.is_floating_point():
        return "single_label_classification"
    return "multi_label_classification"


def classification_loss(logits: torch.Tensor, labels: torch.Tensor, problem_type: str | None,
                        owner: str) -> torch.Tensor:
    """The loss of ``logits`` (B, C) against ``labels`` (see the module's table).

    The loss is computed in float32 whatever the logits' dtype.

    Args:
        logits: (B, C) scores; (B, S, C) tokens work the same for single-label.
        labels: (B,) long, (B,) float or (B, C) float, as the problem type wants.
        problem_type: The configured type, or None for the rule of :func:`problem_type_for`.
        owner: The model's class name, for messages.

    Raises:
        DataError: Labels whose shape does not fit the problem type (named, with the shapes).
    """
    logits = logits.float()  # (B, C): small; float32 targets and loss under mixed precision
    num_classes = logits.shape[-1]
    kind = problem_type_for(problem_type, num_classes, labels)
    if kind == "single_label_classification":
        if labels.is_floating_point() or labels.numel() != logits.numel() // num_classes:
            raise _label_error(owner, kind, problem_type, "(B,) long class ids", labels, logits)
        return F.cross_entropy(logits.reshape(-1, num_classes), labels.reshape(-1))
    if kind == "regression":
        if num_classes == 1:  # (B, 1) -> (B,) against (B,) targets, as Hugging Face squeezes
            logits = logits.squeeze(-1)
        if labels.numel() != logits.numel():
            raise _label_error(owner, kind, problem_type, "(B,) float targets", labels, logits)
        return F.mse_loss(logits, labels.float().reshape(logits.shape))
    if labels.shape != logits.shape:
        raise _label_error(owner, kind, problem_type, "(B, C) float 0/1 targets", labels, logits)
    return F.binary_cross_entropy_with_logits(logits, labels.float())


def _label_error(owner: str, kind: str, configured: str | None, wanted: str,
                 labels: torch.Tensor, logits: torch.Tensor) -> DataError:
    how = "model.problem_type" if configured else "inferred from num_classes and the labels' dtype"
    return DataError(
        f"{owner} scores this batch as {kind!r} ({how}) and wants labels {wanted}, but got "
        f"{tuple(labels.shape)} {str(labels.dtype).removeprefix('torch.')} for logits "
        f"{tuple(logits.shape)}: fix the labels, or set model.problem_type")
