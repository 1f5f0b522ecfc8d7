"""Model weights in and out of checkpoints, with wrapper prefixes handled in one place.

``DistributedDataParallel`` prefixes every key with ``module.`` and ``torch.compile`` with
``_orig_mod.`` (for a compiled submodule, in the middle of the key). :func:`strip_prefixes` is the
only code that knows this; saving and loading both go through it, so weights saved from a wrapped
model load into a plain one and the other way round.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from libai.utils.errors import CheckpointError

from .report import LoadReport

__all__ = ["strip_prefixes", "model_state_for_saving", "load_model_state", "RemapRules"]

#: ``[(regex, replacement), ...]`` applied in order with ``re.sub``, or ``{old_prefix: new_prefix}``.
RemapRules = Sequence[tuple[str, str]] | Mapping[str, str]

_WRAPPER_PREFIXES = ("module.", "_orig_mod.")
_COMPILE_PART = "_orig_mod"


def _strip_with_info(state_dict: Mapping[str, Any]) -> tuple[OrderedDict[str, Any], list[str]]:
    keys = list(state_dict)
    stripped: list[str] = []
    # A wrapper prefixes every key; a prefix on only some keys is a real submodule name.
    while keys:
        prefix = next((p for p in _WRAPPER_PREFIXES if all(k.startswith(p) for k in keys)), None)
        if prefix is None:
            break
        keys = [k[len(prefix) :] for k in keys]
        if prefix not in stripped:
            stripped.append(prefix)
    out: OrderedDict[str, Any] = OrderedDict()
    for original, key in zip(state_dict, keys):
        parts = key.split(".")
        if _COMPILE_PART in parts[:-1]:
            key = ".".join(
                p for i, p in enumerate(parts) if p != _COMPILE_PART or i == len(parts) - 1
            )
            if "_orig_mod." not in stripped:
                stripped.append("_orig_mod.")
        if key in out:
            raise CheckpointError(
                f"State dict keys collide after removing wrapper prefixes: '{original}' becomes "
                f"'{key}', which another key already became. Rename one of them."
            )
        out[key] = state_dict[original]
    return out, stripped


def strip_prefixes(state_dict: Mapping[str, Any]) -> OrderedDict[str, Any]:
    """Remove the key prefixes that DDP (``module.``) and ``torch.compile`` (``_orig_mod.``) add.

    A prefix is removed when every key carries it (repeatedly, so ``module._orig_mod.`` goes too);
    an ``_orig_mod`` component inside a key (a compiled submodule) is dropped as well. Values are
    not copied and keep their device.

    Args:
        state_dict: Parameter name to value.

    Returns:
        A new ordered dict with clean keys.

    Raises:
        CheckpointError: Two keys become the same.
    """
    return _strip_with_info(state_dict)[0]


def _unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside DDP / DataParallel / ``torch.compile`` wrappers (any nesting).

    Same job as ``libai.model.unwrap_model``; repeated here because this package may not import
    ``libai.model``.
    """
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel | nn.DataParallel):
            model = model.module
            continue
        inner = getattr(model, _COMPILE_PART, None)
        if isinstance(inner, nn.Module):
            model = inner
            continue
        return model


def model_state_for_saving(model: nn.Module) -> OrderedDict[str, Any]:
    """The model's state dict with wrappers removed and clean keys, ready to save.

    Tensors stay where they are (same device, no copy); ``save_checkpoint`` writes them and the
    async saver copies them to host memory first.

    Args:
        model: A module, possibly wrapped in DDP and/or compiled.

    Returns:
        The state dict without ``module.`` / ``_orig_mod.`` in its keys.
    """
    return strip_prefixes(_unwrap_model(model).state_dict())


def _remap_fn(remap: RemapRules):
    if isinstance(remap, Mapping):
        prefixes = sorted(remap, key=len, reverse=True)

        def by_prefix(key: str) -> str:
            for old in prefixes:
                if key.startswith(old):
                    return remap[old] + key[len(old) :]
            return key

        return by_prefix
    rules = []
    for rule in remap:
        if not (isinstance(rule, tuple | list) and len(rule) == 2):
            raise CheckpointError(
                f"remap rule {rule!r} is not a (regex, replacement) pair. Use "
                "[(r'^backbone\\.', 'encoder.')] or {'backbone.': 'encoder.'}."
            )
        try:
            rules.append((re.compile(rule[0]), rule[1]))
        except re.error as e:
            raise CheckpointError(f"remap pattern {rule[0]!r} is not a valid regex: {e}") from e

    def by_regex(key: str) -> str:
        for pattern, replacement in rules:
            key = pattern.sub(replacement, key)
        return key

    return by_regex


def _apply_remap(state: OrderedDict[str, Any], remap: RemapRules) -> tuple[OrderedDict, int]:
    rename = _remap_fn(remap)
    out: OrderedDict[str, Any] = OrderedDict()
    source: dict[str, str] = {}
    renamed = 0
    for key, value in state.items():
        new = rename(key)
        if new in out:
            raise CheckpointError(
                f"remap maps both '{source[new]}' and '{key}' to '{new}'. Make the rules specific "
                "enough that each checkpoint key gets its own name."
            )
        renamed += new != key
        out[new], source[new] = value, key
    return out, renamed


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def compare_state(
    model_state: Mapping[str, Any], ckpt_state: Mapping[str, Any]
) -> tuple[LoadReport, dict[str, str]]:
    """Match checkpoint keys to model keys (both are stripped of wrapper prefixes first).

    Returns:
        The report, and a map from checkpoint key to the model's own key for loadable entries.
    """
    clean_model, _ = _strip_with_info(OrderedDict((k, k) for k in model_state))
    report = LoadReport()
    loadable: dict[str, str] = {}
    for key, value in ckpt_state.items():
        if key not in clean_model:
            report.unexpected.append(key)
            continue
        model_key = clean_model[key]
        c_shape, m_shape = _shape(value), _shape(model_state[model_key])
        if c_shape is not None and m_shape is not None and c_shape != m_shape:
            report.shape_mismatches.append((key, c_shape, m_shape))
        else:
            loadable[key] = model_key
            report.loaded.append(key)
    report.missing = [k for k in clean_model if k not in ckpt_state]
    return report, loadable


def load_model_state(
    model: nn.Module,
    state_dict: Mapping[str, Any],
    strict: bool = True,
    remap: RemapRules | None = None,
) -> LoadReport:
    """Load weights into ``model`` and explain any mismatch.

    Steps: strip wrapper prefixes (:func:`strip_prefixes`), apply ``remap``, compare with the
    model's state dict. Missing and unexpected keys are grouped by prefix in the report; shape
    mismatches list ``(key, checkpoint shape, model shape)``.

    Args:
        model: Target module; DDP / compile wrappers are looked through.
        state_dict: Checkpoint weights (e.g. ``load_checkpoint(path)["model"]``).
        strict: Refuse any missing, unexpected or misshapen key; nothing is loaded then. With
            False the matching entries are loaded and the rest is reported. Defaults to True.
        remap: Rename checkpoint keys after stripping: ``[(regex, replacement), ...]`` applied in
            order with ``re.sub``, or ``{old_prefix: new_prefix}`` (longest prefix wins).
            Defaults to None.

    Returns:
        The :class:`LoadReport`.

    Raises:
        CheckpointError: ``strict`` and the checkpoint does not match; the message holds the
            report and the fix.
    """
    if not isinstance(state_dict, Mapping):
        raise CheckpointError(
            f"load_model_state expects a state dict (a mapping), got {type(state_dict).__name__}."
        )
    if not state_dict and next(iter(_unwrap_model(model).state_dict()), None) is not None:
        # e.g. load_checkpoint(path)["state_dict"] of a sharded checkpoint: strict=False would
        # only hide that no weight is there
        raise CheckpointError(
            "The checkpoint's state dict is empty: it holds no model weights. A sharded "
            "checkpoint (iter_N.pth + iter_N.dcp/) keeps them in its .dcp folder: read it with "
            "libai.checkpoint.checkpoint_weights(path), or make one file of it with "
            "`convert_checkpoint.py sharded2file CHECKPOINT OUT.pth`.")
    ckpt_state, stripped = _strip_with_info(state_dict)
    renamed = 0
    if remap:
        ckpt_state, renamed = _apply_remap(ckpt_state, remap)
    target = _unwrap_model(model)
    report, loadable = compare_state(target.state_dict(), ckpt_state)
    report.stripped_prefixes, report.renamed = stripped, renamed
    if strict and not report.ok:
        raise CheckpointError(_strict_message(report))
    target.load_state_dict({loadable[k]: ckpt_state[k] for k in report.loaded}, strict=False)
    return report


def _strict_message(report: LoadReport) -> str:
    fixes = [
        f"pass strict=False to load the {len(report.loaded)} matching entries and keep the rest "
        "as initialised"
    ]
    if not report.loaded:
        fixes.insert(0, "check that this checkpoint belongs to this model (no entry matches)")
    hint = report.remap_hint
    if hint:
        fixes.append(f"pass remap={hint!r}, which matches renamed keys")
    elif report.missing and report.unexpected and _shared_tails(report.missing, report.unexpected):
        fixes.append("pass remap={'old_prefix.': 'new_prefix.'} to rename checkpoint keys")
    elif report.missing and report.unexpected:  # a new head on a pretrained body, most likely
        fixes[-1] += " (a task head on a pretraining checkpoint: load_from=dict(path=..., strict=False))"
    if report.shape_mismatches:
        fixes.append(
            "check that the model config (sizes, number of classes) matches the checkpoint"
        )
    return (
        "The checkpoint does not match the model (strict=True), so nothing was loaded.\n"
        f"{report}\nTo fix: " + "; or ".join(fixes) + "."
    )


def _shared_tails(missing: list[str], unexpected: list[str]) -> bool:
    """Whether some missing and unexpected keys end alike (``x.dense.weight``): a rename, not a
    new head."""
    def tail(key: str) -> str:
        return ".".join(key.split(".")[-2:])

    return bool({tail(k) for k in missing} & {tail(k) for k in unexpected})
