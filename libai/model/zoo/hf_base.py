"""The base of the Hugging Face adapters (``hf_bert.py``, ``hf_gpt2.py``, ``hf_llama.py``,
``hf_roberta.py``) and the helpers they share. It imports no adapter: each family's record
(``family.py``) names its adapter, and ``hf.py`` reaches it through the record.

An adapter translates one family both ways without touching files: a ``config.json`` dict and
Hugging Face state dict to ``model=dict(type=..., ...)`` and libai's state dict
(:meth:`HFAdapter.from_hf`), a model back (:meth:`HFAdapter.to_hf`), and a libai tokenizer to
the tokenizer files ``AutoTokenizer`` loads (:meth:`HFAdapter.tokenizer_files`). The tokenizer
is read by duck typing (``.kind``, ``.backend``, ``.special_tokens`` and the special ids of
``libai.data.text.TextTokenizer``): no data code is imported here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from libai.utils.errors import CheckpointError, ConfigError

__all__ = ["ACT_TO_HF", "HFAdapter", "State", "activation", "architecture", "check_tied",
           "label_config", "num_labels", "pop_tied_mlm_head", "refuse", "tokenizer_configs"]

State = dict[str, torch.Tensor]
_ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "relu": "relu"}
ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}


class HFAdapter:
    """One family's translation to and from Hugging Face; a subclass per family.

    ``tokenizer_kind``: the ``TextTokenizer.kind`` the family exports with ("wordpiece",
    "bpe"), None for either.
    """

    tokenizer_kind: str | None = None

    def __init__(self, family: Any) -> None:
        self.family = family  # the family.ModelFamily record that names this adapter

    def from_hf(self, config: dict[str, Any], state: State,
                target: str | None) -> tuple[dict[str, Any], State]:
        """``model`` config dict (``type`` + kwargs) and libai state dict of a Hugging Face
        ``config`` and ``state`` (popped as mapped; what is left keeps its name so that a
        strict load reports it). ``target``: the libai class the keys are for, or None (the
        folder's ``architectures``, or its weights, decide)."""
        raise NotImplementedError

    def to_hf(self, model: nn.Module, a: Any, state: State) -> tuple[dict[str, Any], State]:
        """``config.json`` dict and Hugging Face state dict of ``model`` (``a``: its
        ``config``); every key mapped is popped from ``state``."""
        raise NotImplementedError

    def tokenizer_files(self, tokenizer: Any, max_length: int, vocab_size: int,
                        classifier: bool = False,
                        pad_token_id: int | None = None) -> dict[str, str]:
        """File name -> text of the tokenizer files (``tokenizer.json``, ``tokenizer_config.json``
        with ``model_max_length=max_length``, ``special_tokens_map.json``, and the family's own).

        Raises:
            ConfigError: A tokenizer of the other kind, or with more tokens than ``vocab_size``.
        """
        kind, want = getattr(tokenizer, "kind", None), self.tokenizer_kind
        if (want is not None and kind != want) or not hasattr(tokenizer, "backend"):
            raise ConfigError(
                f"a {self.family.name} model exports with a {want or 'BPE or WordPiece'} tokenizer "
                f"(libai's TextTokenizer), got {type(tokenizer).__name__} of kind {kind!r}: pass "
                f"the tokenizer the model was trained with")
        size = tokenizer.backend.get_vocab_size(with_added_tokens=True)
        if size > vocab_size:
            raise ConfigError(f"the tokenizer has {size} tokens but the model {vocab_size}: its "
                              f"ids would not fit; pass the tokenizer the model was trained with")
        return self.write_tokenizer(tokenizer, max_length, classifier, pad_token_id)

    def write_tokenizer(self, tokenizer: Any, max_length: int, classifier: bool,
                        pad_token_id: int | None) -> dict[str, str]:
        """The family's tokenizer files, after :meth:`tokenizer_files` checked the tokenizer."""
        raise NotImplementedError

    def export_tokenizer(self, tokenizer: Any, config: dict[str, Any],
                         a: Any) -> dict[str, str]:
        """The tokenizer files of an export of a model with config ``a``; ``config`` (the
        ``config.json`` dict) takes the tokenizer's special ids where the family has them."""
        return self.tokenizer_files(tokenizer, a["max_position_embeddings"], a["vocab_size"])


def architecture(c: dict[str, Any]) -> str:
    """The first of a config's ``architectures``, "" without any."""
    return (c.get("architectures") or [""])[0]


def activation(config: dict[str, Any], key: str, default: str) -> str:
    """libai's name of the activation a ``config.json`` names under ``key``."""
    name = config.get(key, default)
    if name not in _ACT_FROM_HF:
        raise CheckpointError(f"config.json has {key}={name!r}; libai supports "
                              f"{sorted(_ACT_FROM_HF)}")
    return _ACT_FROM_HF[name]


def refuse(config: dict[str, Any], **unsupported: bool) -> None:
    """Stop on a ``config.json`` option set to a value libai's model does not implement."""
    for key, bad in unsupported.items():
        if config.get(key) is bad:
            raise CheckpointError(f"config.json has {key}={bad!r}, which libai's "
                                  f"{config['model_type']} model does not implement")


def num_labels(c: dict[str, Any]) -> int:
    """Hugging Face's ``num_labels``: the size of ``id2label`` (2 when the config has none)."""
    return len(c["id2label"]) if c.get("id2label") else c.get("num_labels", 2)


def check_tied(extra: torch.Tensor | None, tied: torch.Tensor | None, name: str,
               tied_name: str = "the word embeddings") -> None:
    """Stop when a Hugging Face copy (``extra``) of a weight libai ties differs from it."""
    if extra is not None and tied is not None and not torch.equal(extra, tied):
        raise CheckpointError(f"{name} differs from {tied_name}: libai's LM head is tied to "
                              f"them, so this checkpoint (tie_word_embeddings false?) cannot load "
                              f"exactly")


def pop_tied_mlm_head(state: State, out: State, word_key: str, decoder: str, bias_key: str) -> None:
    """Move a masked-LM head's output bias (``bias_key``, else the decoder's) from the Hugging
    Face ``state`` to ``out["mlm_head.bias"]``, checking that the ``decoder`` Linear is the
    tied one: its weight the word embeddings (``out[word_key]``), its bias that bias."""
    decoder_w = state.pop(f"{decoder}.weight", None)
    decoder_b = state.pop(f"{decoder}.bias", None)
    bias = state.pop(bias_key, decoder_b)
    if bias is not None:
        out["mlm_head.bias"] = bias
    check_tied(decoder_w, out.get(word_key), f"{decoder}.weight")
    check_tied(decoder_b, bias, f"{decoder}.bias", bias_key)


def tokenizer_configs(config: dict[str, Any], specials: dict[str, str]) -> dict[str, str]:
    """``tokenizer_config.json`` and ``special_tokens_map.json``."""
    return {"tokenizer_config.json": json.dumps(config, indent=2) + "\n",
            "special_tokens_map.json": json.dumps(specials, indent=2) + "\n"}


def label_config(model: nn.Module, label_names: Sequence[str] | None) -> dict[str, Any]:
    """``id2label`` and ``label2id`` of a classifier (nothing for other models)."""
    num_classes = model.config.get("num_classes")
    if num_classes is None:
        if label_names is not None:
            raise ConfigError(f"label_names were given but {type(model).__name__} has no "
                              f"classes to name: leave them out")
        return {}
    names = ([f"LABEL_{i}" for i in range(num_classes)] if label_names is None
             else [str(n) for n in label_names])
    if len(names) != num_classes or len(set(names)) != len(names):
        raise ConfigError(f"label_names {names} must be {num_classes} distinct names, one per "
                          f"class of {type(model).__name__} (num_classes={num_classes})")
    return dict(id2label={str(i): n for i, n in enumerate(names)},
                label2id={n: i for i, n in enumerate(names)})
