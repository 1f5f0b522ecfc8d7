"""Hugging Face <-> libai names and configs for RoBERTa (``model_type`` "roberta").

Classes both ways: RobertaModel (RobertaModel, its pooler when the folder has one) and
RobertaForMaskedLM (RobertaForMaskedLM). The encoder's tensors are BERT's under ``roberta.``
(``hf_mapping._bert_pairs`` names them); the LM head is ``lm_head.dense`` -> ``lm_head.layer_norm``
-> the tied ``lm_head.decoder`` with ``lm_head.bias``. A separate decoder weight must equal the
word embeddings and a decoder bias ``lm_head.bias`` (they are then dropped); exports hold them
once, with ``tie_word_embeddings: true``. ``hf_mapping.hf_to_libai`` and ``libai_to_hf`` call
:func:`roberta_from_hf` and :func:`roberta_to_hf`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from torch import nn

from libai.utils.errors import CheckpointError

from .hf_mapping import (
    _BERT_HEADS,
    _bert_pairs,
    _refuse,
    bert_hf_config,
    bert_kwargs_from_hf,
    pop_tied_mlm_head,
)
from .roberta import RobertaModel

__all__ = ["roberta_from_hf", "roberta_to_hf"]

State = dict
_ARCHS = ("RobertaModel", "RobertaForMaskedLM")
# (Hugging Face module, ours) of the masked-LM head; lm_head.bias is a parameter of its own
_LM_HEAD = [("lm_head.dense", "mlm_head.dense"), ("lm_head.layer_norm", "mlm_head.norm")]


def _encoder_pairs(num_layers: int, hf: str, ours: str) -> list[tuple[str, str]]:
    """(Hugging Face key, libai key) of the encoder (BERT's names, without BERT's heads)."""
    heads = {f"{h}.{p}" for h, _ in _BERT_HEADS for p in ("weight", "bias")}
    return [(h, o) for h, o in _bert_pairs(num_layers, hf, ours) if h not in heads]


def _head_pairs() -> list[tuple[str, str]]:
    return [(f"{h}.{p}", f"{o}.{p}") for h, o in _LM_HEAD for p in ("weight", "bias")]


def roberta_from_hf(c: dict[str, Any], state: State, target: str | None) -> tuple[dict, State]:
    """``model`` config dict (``type`` + kwargs) and libai state of a Hugging Face RoBERTa.

    Args:
        c: The parsed ``config.json``.
        state: The weights, Hugging Face names (popped as they are mapped).
        target: The libai class the keys are for, or None: the folder's ``architectures``
            (or, without it, the weights: an ``lm_head`` makes a RobertaForMaskedLM).

    Raises:
        CheckpointError: A head libai does not have (sequence classification, causal LM...),
            a decoder, no ``pad_token_id``, or an untied LM head.
    """
    _refuse(c, is_decoder=True, add_cross_attention=True)
    if c.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"config.json has position_embedding_type="
                              f"{c['position_embedding_type']!r}; libai's RoBERTa has 'absolute' "
                              f"only")
    arch = (c.get("architectures") or [""])[0]
    if arch and arch not in _ARCHS and target is None:
        raise CheckpointError(
            f"config.json's architectures is {arch!r}: libai converts RoBERTa as "
            f"{' and '.join(_ARCHS)} only; load the encoder into model.type='RobertaModel' "
            f"(load_from=dict(path=..., strict=False)) to start a head of your own")
    if c.get("pad_token_id", 1) is None:
        raise CheckpointError("config.json has pad_token_id=null, but RoBERTa's positions "
                              "count from its padding index: set it (roberta-base: 1)")
    kwargs = bert_kwargs_from_hf(c, pad_token_id=1)  # RobertaConfig's defaults
    masked_lm = arch == "RobertaForMaskedLM" or (not arch and any(k.startswith("lm_head.")
                                                                   for k in state))
    cfg_type = "RobertaForMaskedLM" if masked_lm else "RobertaModel"
    if cfg_type == "RobertaModel" and target is None:  # a folder without the pooler has none
        kwargs["add_pooler"] = any(".pooler." in f".{k}" for k in state)
    ours = "" if (target or cfg_type) == "RobertaModel" else "bert."
    hf = "roberta." if any(k.startswith("roberta.") for k in state) else ""
    out: State = OrderedDict()
    for h, o in _encoder_pairs(kwargs["num_layers"], hf, ours) + _head_pairs():
        if h in state:
            out[o] = state.pop(h)
    pop_tied_mlm_head(state, out, f"{ours}embeddings.word_embeddings.weight", "lm_head.decoder",
                      "lm_head.bias")
    out.update(state)  # whatever is left keeps its name: a strict load reports it
    return {"type": cfg_type, **kwargs}, out


def roberta_to_hf(model: nn.Module, a: Any, state: State) -> tuple[dict, State]:
    """The ``config.json`` dict and Hugging Face state of a libai RobertaModel or
    RobertaForMaskedLM; every key mapped is popped from ``state``.

    Raises:
        CheckpointError: A ``pre_norm=True`` model (Hugging Face's RoBERTa is post-LN).
    """
    if a.get("pre_norm"):
        raise CheckpointError("a pre_norm=True RoBERTa has no Hugging Face equivalent (its "
                              "RoBERTa is post-LN): export works for pre_norm=False models")
    if isinstance(model, RobertaModel):
        arch, ours, hf = "RobertaModel", "", ""
    else:
        arch, ours, hf = "RobertaForMaskedLM", "bert.", "roberta."
    pairs = _encoder_pairs(a["num_layers"], hf, ours) + _head_pairs()
    out = {h: state.pop(o) for h, o in pairs if o in state}
    if "mlm_head.bias" in state:
        out["lm_head.bias"] = state.pop("mlm_head.bias")
    return bert_hf_config(a, arch, "roberta"), out
