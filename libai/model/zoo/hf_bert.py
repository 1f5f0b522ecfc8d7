"""BERT's Hugging Face adapter (``model_type`` "bert"): weights, config and tokenizer both ways.

Classes both ways: BertModel, BertForPreTraining (BertForMaskedLM), BertForSequenceClassification,
BertForTokenClassification. A classifier's ``num_classes`` is Hugging Face's ``num_labels``
(the size of ``id2label``), its ``problem_type`` theirs. The LM head is tied to the word
embeddings: a separate ``cls.predictions.decoder`` weight must equal them (it is then dropped);
exports hold the embeddings once. RoBERTa's adapter (``hf_roberta.py``) is this one with
RoBERTa's names and heads.

The tokenizer: ``tokenizer.json`` gets BERT's post-processor ("[CLS] $A [SEP]", pairs "[CLS] $A
[SEP] $B:1 [SEP]:1", the second segment's token type 1), as libai's BERT datasets frame text, so
that Hugging Face, which adds special tokens by default, frames it the same way;
``tokenizer_config.json`` (``BertTokenizerFast``, the normalizer's options that ``transformers``
5 rebuilds it from, ``model_max_length``, the special tokens), ``special_tokens_map.json`` and
``vocab.txt`` (one token a line, in id order).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from torch import nn

from libai.utils.errors import CheckpointError

from .bert import BertModel
from .bert_heads import BertForSequenceClassification, BertForTokenClassification
from .hf_base import (
    ACT_TO_HF,
    HFAdapter,
    State,
    activation,
    architecture,
    num_labels,
    pop_tied_mlm_head,
    refuse,
    tokenizer_configs,
)

__all__ = ["BertAdapter", "encoder_pairs"]

# (Hugging Face module in an encoder layer, libai's in a TransformerBlock)
_LAYER = [("attention.self.query", "attn.q_proj"), ("attention.self.key", "attn.k_proj"),
          ("attention.self.value", "attn.v_proj"), ("attention.output.dense", "attn.out_proj"),
          ("attention.output.LayerNorm", "attn_norm"), ("intermediate.dense", "mlp.fc1"),
          ("output.dense", "mlp.fc2"), ("output.LayerNorm", "mlp_norm")]
_CLASSIFIERS = (BertForSequenceClassification, BertForTokenClassification)


def encoder_pairs(num_layers: int, hf: str, ours: str) -> list[tuple[str, str]]:
    """(Hugging Face key, libai key) of every tensor of a BERT-shaped encoder."""
    modules = [("embeddings.word_embeddings", "embeddings.word_embeddings"),
               ("embeddings.position_embeddings", "embeddings.position_embeddings"),
               ("embeddings.token_type_embeddings", "embeddings.token_type_embeddings"),
               ("embeddings.LayerNorm", "embeddings.norm"), ("pooler.dense", "pooler.dense")]
    modules += [(f"encoder.layer.{i}.{h}", f"blocks.{i}.{o}")
                for i in range(num_layers) for h, o in _LAYER]
    return [(f"{hf}{h}.{p}", f"{ours}{o}.{p}") for h, o in modules for p in ("weight", "bias")
            if not (p == "bias" and "_embeddings" in o)]


class BertAdapter(HFAdapter):
    """BERT; the class attributes are what RoBERTa's adapter changes."""

    tokenizer_kind = "wordpiece"
    bare = "BertModel"  # the encoder alone: its keys have no prefix
    hf_prefix = "bert."  # the encoder's prefix in a Hugging Face model with a head
    default_pad = 0  # pad_token_id when config.json has none
    # (Hugging Face module, ours) of the heads; the tied decoder and its bias
    heads = [("cls.predictions.transform.dense", "mlm_head.dense"),
             ("cls.predictions.transform.LayerNorm", "mlm_head.norm"),
             ("cls.seq_relationship", "sentence_head"), ("classifier", "classifier")]
    decoder, decoder_bias = "cls.predictions.decoder", "cls.predictions.bias"

    def pairs(self, num_layers: int, hf: str, ours: str) -> list[tuple[str, str]]:
        """(Hugging Face key, libai key) of every tensor that maps one to one."""
        return encoder_pairs(num_layers, hf, ours) + [
            (f"{h}.{p}", f"{o}.{p}") for h, o in self.heads for p in ("weight", "bias")]

    def encoder_kwargs(self, c: dict[str, Any]) -> dict[str, Any]:
        """The libai kwargs of the encoder; absent keys take Hugging Face's defaults."""
        refuse(c, is_decoder=True, add_cross_attention=True)
        if c.get("position_embedding_type", "absolute") != "absolute":
            raise CheckpointError(f"config.json has position_embedding_type="
                                  f"{c['position_embedding_type']!r}; libai's "
                                  f"{self.family.title} has 'absolute' only")
        return dict(
            vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
            num_layers=c["num_hidden_layers"], num_heads=c["num_attention_heads"],
            ffn_hidden_size=c["intermediate_size"],
            max_position_embeddings=c.get("max_position_embeddings", 512),
            type_vocab_size=c.get("type_vocab_size", 2),
            hidden_dropout=c.get("hidden_dropout_prob", 0.1),
            attention_dropout=c.get("attention_probs_dropout_prob", 0.1),
            activation=activation(c, "hidden_act", "gelu"),
            layer_norm_eps=c.get("layer_norm_eps", 1e-12),
            init_std=c.get("initializer_range", 0.02),
            pad_token_id=c.get("pad_token_id", self.default_pad))

    def from_hf(self, c: dict[str, Any], state: State,
                target: str | None) -> tuple[dict[str, Any], State]:
        kwargs = self.encoder_kwargs(c)
        cfg_type = self.choose_class(c, state, kwargs, target)
        ours = "" if (target or cfg_type) == self.bare else "bert."
        return {"type": cfg_type, **kwargs}, self.map_from_hf(state, kwargs["num_layers"], ours)

    def choose_class(self, c: dict[str, Any], state: State, kwargs: dict[str, Any],
                     target: str | None) -> str:
        """The libai class of a folder (its ``architectures``, or its weights), ``kwargs``
        completed with the head's."""
        arch = architecture(c)
        has = {k.split(".", 1)[0] for k in state}
        pooler = any("pooler." in k for k in state)
        if arch == "BertForSequenceClassification" or (not arch and "classifier" in has and pooler):
            kwargs.update(num_classes=num_labels(c), classifier_dropout=c.get("classifier_dropout"),
                          problem_type=c.get("problem_type"))
            return "BertForSequenceClassification"
        if arch == "BertForTokenClassification" or (not arch and "classifier" in has):
            kwargs.update(num_classes=num_labels(c), classifier_dropout=c.get("classifier_dropout"))
            return "BertForTokenClassification"
        if arch == "BertModel" or (arch not in ("BertForPreTraining", "BertForMaskedLM")
                                   and "cls" not in has):
            return "BertModel"
        kwargs["second_head"] = "nsp" if "cls.seq_relationship.weight" in state else None
        return "BertForPreTraining"

    def map_from_hf(self, state: State, num_layers: int, ours: str) -> State:
        """libai's state dict: the mapped tensors, then what is left under its own name (a
        strict load reports it)."""
        hf = self.hf_prefix if any(k.startswith(self.hf_prefix) for k in state) else ""
        out: State = OrderedDict()
        for h, o in self.pairs(num_layers, hf, ours):
            if h in state:
                out[o] = state.pop(h)
        pop_tied_mlm_head(state, out, f"{ours}embeddings.word_embeddings.weight", self.decoder,
                          self.decoder_bias)
        out.update(state)
        return out

    def names(self, model: nn.Module) -> tuple[str, str, str]:
        """(Hugging Face class, libai prefix, Hugging Face prefix) of ``model``."""
        if isinstance(model, BertModel):
            return "BertModel", "", ""
        arch = type(model).__name__ if isinstance(model, _CLASSIFIERS) else (
            "BertForMaskedLM" if model.second_head is None else "BertForPreTraining")
        return arch, "bert.", "bert."

    def to_hf(self, model: nn.Module, a: Any, state: State) -> tuple[dict[str, Any], State]:
        title = self.family.title
        if a.get("pre_norm"):
            raise CheckpointError(f"a pre_norm=True {title} has no Hugging Face equivalent (its "
                                  f"{title} is post-LN): export works for pre_norm=False models")
        arch, ours, hf = self.names(model)
        out = {h: state.pop(o) for h, o in self.pairs(a["num_layers"], hf, ours) if o in state}
        if "mlm_head.bias" in state:
            out[self.decoder_bias] = state.pop("mlm_head.bias")
        config = dict(
            architectures=[arch], model_type=self.family.name, vocab_size=a["vocab_size"],
            hidden_size=a["hidden_size"], num_hidden_layers=a["num_layers"],
            num_attention_heads=a["num_heads"], intermediate_size=a["ffn_hidden_size"],
            hidden_act=ACT_TO_HF[a["activation"]], hidden_dropout_prob=a["hidden_dropout"],
            attention_probs_dropout_prob=a["attention_dropout"],
            max_position_embeddings=a["max_position_embeddings"],
            type_vocab_size=a["type_vocab_size"], initializer_range=a["init_std"],
            layer_norm_eps=a["layer_norm_eps"], pad_token_id=a["pad_token_id"],
            position_embedding_type="absolute")
        if isinstance(model, _CLASSIFIERS):
            config["classifier_dropout"] = a["classifier_dropout"]
        if isinstance(model, BertForSequenceClassification):
            config["problem_type"] = a["problem_type"]
        return config, out

    def write_tokenizer(self, tokenizer: Any, max_length: int, classifier: bool,
                        pad_token_id: int | None) -> dict[str, str]:
        from tokenizers.processors import TemplateProcessing

        backend = type(tokenizer.backend).from_str(tokenizer.backend.to_str())  # a copy
        cls, sep = "[CLS]", "[SEP]"
        backend.post_processor = TemplateProcessing(
            single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
            special_tokens=[(cls, tokenizer.cls_id), (sep, tokenizer.sep_id)])
        specials = dict(unk_token="[UNK]", sep_token=sep, pad_token="[PAD]", cls_token=cls,
                        mask_token="[MASK]")
        config = dict(tokenizer_class="BertTokenizerFast", **_normalizer_options(backend),
                      model_max_length=max_length, **specials)
        vocab = backend.get_vocab(with_added_tokens=True)
        lines = [token for token, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
        return {"tokenizer.json": backend.to_str(pretty=True),
                **tokenizer_configs(config, specials), "vocab.txt": "\n".join(lines) + "\n"}


def _normalizer_options(backend: Any) -> dict[str, Any]:
    """BertTokenizer's normalizer arguments, read from the backend's normalizer."""
    normalizer = json.loads(backend.to_str()).get("normalizer") or {}
    if normalizer.get("type") == "BertNormalizer":
        return dict(do_lower_case=normalizer.get("lowercase", True),
                    strip_accents=normalizer.get("strip_accents"),
                    tokenize_chinese_chars=normalizer.get("handle_chinese_chars", True))
    return dict(do_lower_case='"Lowercase"' in json.dumps(normalizer))
