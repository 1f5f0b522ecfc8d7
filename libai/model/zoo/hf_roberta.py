"""RoBERTa's Hugging Face adapter (``model_type`` "roberta"): BERT's (``hf_bert.py``) with
RoBERTa's names, head and tokenizer.

Classes both ways: RobertaModel (its pooler when the folder has one) and RobertaForMaskedLM.
The encoder's tensors are BERT's under ``roberta.``; the LM head is ``lm_head.dense`` ->
``lm_head.layer_norm`` -> the tied ``lm_head.decoder`` with ``lm_head.bias``. A separate decoder
weight must equal the word embeddings and a decoder bias ``lm_head.bias`` (they are then
dropped); exports hold them once, with ``tie_word_embeddings: true``.

The tokenizer (a byte-level BPE with ``<s> <pad> </s> <unk> <mask>``): ``tokenizer.json`` with
RoBERTa's post-processor (``<s> $A </s>``, pairs ``<s> $A </s></s> $B </s>``, as Hugging Face
frames RoBERTa's input), ``vocab.json`` + ``merges.txt`` (the slow tokenizer's files), and a
``tokenizer_config.json`` of class ``RobertaTokenizerFast``.
"""

from __future__ import annotations

import json
from typing import Any

from torch import nn

from libai.utils.errors import CheckpointError, ConfigError

from .hf_base import State, architecture, tokenizer_configs
from .hf_bert import BertAdapter
from .roberta import RobertaModel

__all__ = ["RobertaAdapter"]

_ARCHS = ("RobertaModel", "RobertaForMaskedLM")
_ROLES = ("bos", "eos", "sep", "cls", "unk", "pad", "mask")


class RobertaAdapter(BertAdapter):
    tokenizer_kind = "bpe"
    bare = "RobertaModel"
    hf_prefix = "roberta."
    default_pad = 1  # RobertaConfig's
    heads = [("lm_head.dense", "mlm_head.dense"), ("lm_head.layer_norm", "mlm_head.norm")]
    decoder, decoder_bias = "lm_head.decoder", "lm_head.bias"

    def encoder_kwargs(self, c: dict[str, Any]) -> dict[str, Any]:
        kwargs = super().encoder_kwargs(c)
        if kwargs["pad_token_id"] is None:
            raise CheckpointError("config.json has pad_token_id=null, but RoBERTa's positions "
                                  "count from its padding index: set it (roberta-base: 1)")
        return kwargs

    def choose_class(self, c: dict[str, Any], state: State, kwargs: dict[str, Any],
                     target: str | None) -> str:
        """The folder's ``architectures`` or, without it, its weights: an ``lm_head`` makes a
        RobertaForMaskedLM; a head libai does not have is refused."""
        arch = architecture(c)
        if arch and arch not in _ARCHS and target is None:
            raise CheckpointError(
                f"config.json's architectures is {arch!r}: libai converts RoBERTa as "
                f"{' and '.join(_ARCHS)} only; load the encoder into model.type='RobertaModel' "
                f"(load_from=dict(path=..., strict=False)) to start a head of your own")
        if arch == "RobertaForMaskedLM" or (not arch and any(k.startswith("lm_head.")
                                                             for k in state)):
            return "RobertaForMaskedLM"
        if target is None:  # a folder without the pooler has none
            kwargs["add_pooler"] = any(".pooler." in f".{k}" for k in state)
        return "RobertaModel"

    def names(self, model: nn.Module) -> tuple[str, str, str]:
        if isinstance(model, RobertaModel):
            return "RobertaModel", "", ""
        return "RobertaForMaskedLM", "bert.", "roberta."

    def export_tokenizer(self, tokenizer: Any, config: dict[str, Any],
                         a: Any) -> dict[str, str]:
        """Positions start after the padding index (514 -> 512 tokens); the tokenizer must pad
        with the model's ``pad_token_id``.

        Raises:
            ConfigError: The tokenizer pads with another id.
        """
        longest = a["max_position_embeddings"] - a["pad_token_id"] - 1
        files = self.tokenizer_files(tokenizer, longest, a["vocab_size"])
        if tokenizer.pad_id != a["pad_token_id"]:
            raise ConfigError(
                f"the tokenizer pads with id {tokenizer.pad_id} but the RoBERTa model has "
                f"pad_token_id={a['pad_token_id']}, from which its positions count: pass the "
                f"tokenizer the model was trained with")
        config.update(bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.eos_id)
        return files

    def write_tokenizer(self, tokenizer: Any, max_length: int, classifier: bool,
                        pad_token_id: int | None) -> dict[str, str]:
        from tokenizers.processors import RobertaProcessing

        roles = tokenizer.special_tokens
        missing = [r for r in _ROLES if r not in roles]
        if missing:
            raise ConfigError(
                f"a roberta model exports with RoBERTa's special tokens, but the tokenizer has "
                f"no {', '.join(f'{r}_token' for r in missing)}: train it with special_tokens="
                f"['<s>', '<pad>', '</s>', '<unk>', '<mask>'] or pass the tokenizer the model "
                f"was trained with")
        data = json.loads(tokenizer.backend.to_str())
        for token in data.get("added_tokens", []):  # roberta-base's <mask> takes the space
            if token["content"] == roles["mask"]:  # before it ("the <mask>." as "the" + <mask>)
                token["lstrip"] = True
        backend = type(tokenizer.backend).from_str(json.dumps(data))  # a copy
        prefix_space = bool((data.get("pre_tokenizer") or {}).get("add_prefix_space", False))
        backend.post_processor = RobertaProcessing(  # (sep, cls) by position: no keywords
            (roles["sep"], tokenizer.sep_id), (roles["cls"], tokenizer.cls_id),
            trim_offsets=True, add_prefix_space=prefix_space)
        specials = {f"{r}_token": roles[r] for r in _ROLES}
        config = dict(tokenizer_class="RobertaTokenizerFast", model_max_length=max_length,
                      add_prefix_space=prefix_space, trim_offsets=True, errors="replace",
                      **specials)
        model = data["model"]
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        return {"tokenizer.json": backend.to_str(pretty=True),
                **tokenizer_configs(config, specials),
                "vocab.json": json.dumps(model["vocab"], ensure_ascii=False) + "\n",
                "merges.txt": "\n".join(["#version: 0.2", *merges]) + "\n"}
