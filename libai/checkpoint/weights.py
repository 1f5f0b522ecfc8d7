"""Load a model's weights from any checkpoint libai reads (``load_from``, ``tools/test.py``)."""

from __future__ import annotations

from typing import Any

from torch import nn

from .io import load_checkpoint
from .model_state import RemapRules, load_model_state
from .sharded import is_sharded_model, load_full_into_sharded, load_sharded, read_sharded_weights

__all__ = ["checkpoint_weights", "load_weights"]


def checkpoint_weights(path: str, ckpt: dict | None = None) -> dict:
    """The model weights of libai checkpoint ``path`` as whole tensors, whether it holds them
    itself or is sharded (``iter_N.pth`` + ``iter_N.dcp/``: the shards of every rank are read in
    this process), for a one-process reader such as generate, predict or libai2hf. ``ckpt`` is
    the file's content when the caller has read it already."""
    ckpt = load_checkpoint(path) if ckpt is None else ckpt
    if isinstance(ckpt, dict) and "sharded" in ckpt:
        return read_sharded_weights(path, ckpt["sharded"])
    return ckpt.get("state_dict", ckpt) if isinstance(ckpt, dict) else ckpt


def load_weights(model: nn.Module, path: str, strict: bool = True,
                 remap: RemapRules | None = None, *, sharded: bool | None = None,
                 elsewhere: tuple[str, ...] = ()) -> tuple[Any, int | None]:
    """Load the weights of ``path`` into ``model``: a libai checkpoint (whole or sharded: every
    rank reads its part, resharded to this run's layout) or a Hugging Face folder (``config.json``
    + weights of a BERT or GPT-2 model, converted to this model's names after checking that its
    model type and dimensions match). Returns the load report and the checkpoint's training
    iteration (None when it has none). ``sharded`` and ``elsewhere``: a run's
    ``execution.sharded`` and ``execution.elsewhere`` (default: ``model`` holds DTensors)."""
    from libai.model.zoo.hf import hf_state_dict_for, is_hf_folder

    sharded = is_sharded_model(model) if sharded is None else sharded

    iteration = None
    if is_hf_folder(path):
        weights = hf_state_dict_for(model, path)
    else:
        ckpt = load_checkpoint(path)
        if "sharded" in ckpt and sharded and strict and remap is None:
            load_sharded(path, ckpt["sharded"], model, None)  # every rank reads its part
            weights = None
        else:  # whole tensors, through the load report (missing keys, strict, remap)
            weights = checkpoint_weights(path, ckpt)
        it = ckpt.get("meta", {}).get("iter") if isinstance(ckpt.get("meta"), dict) else None
        if isinstance(it, int) and not isinstance(it, bool) and it >= 0:
            iteration = it
    if weights is None:
        return "", iteration
    if sharded:  # whole tensors into this run's shards
        return load_full_into_sharded(model, weights, strict=strict, elsewhere=elsewhere), iteration
    return load_model_state(model, weights, strict=strict, remap=remap), iteration
