"""GPT-2's Hugging Face adapter (``model_type`` "gpt2"): weights, config and tokenizer both ways.

Classes both ways: GPTModel (GPT2Model), GPTForCausalLM (GPT2LMHeadModel),
GPTForSequenceClassification (GPT2ForSequenceClassification, ``score.weight`` keeps its name).
GPT-2's Conv1D weights are stored (in, out) and its q/k/v as one ``c_attn``: they are transposed
and split here. The LM head is tied to the word embeddings: a separate ``lm_head.weight`` must
equal them (it is then dropped).

The tokenizer (byte-level BPE): ``tokenizer.json`` as it is for a language model (neither side
adds a token); for a classifier with "$A <|endoftext|>" (pairs "$A <|endoftext|> $B
<|endoftext|>"), the framing of libai's ``LabeledTextDataset``, so that the classifier scores the
same last token in both libraries; a ``tokenizer_config.json`` of class ``GPT2TokenizerFast``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from libai.utils.errors import ConfigError

from .gpt import GPTForSequenceClassification, GPTModel
from .hf_base import (
    ACT_TO_HF,
    HFAdapter,
    State,
    activation,
    architecture,
    check_tied,
    num_labels,
    refuse,
    tokenizer_configs,
)

__all__ = ["GPT2Adapter"]

# (Hugging Face module, ours, Conv1D weight to transpose) of a block
_LAYER = [("ln_1", "attn_norm", False), ("ln_2", "mlp_norm", False),
          ("attn.c_proj", "attn.out_proj", True), ("mlp.c_fc", "mlp.fc1", True),
          ("mlp.c_proj", "mlp.fc2", True)]
_EOD = "<|endoftext|>"


def _pairs(num_layers: int, hf: str, ours: str) -> list[tuple[str, str, bool]]:
    """(Hugging Face key, libai key, transpose) for GPT-2 tensors that map one to one (all but
    the fused c_attn)."""
    modules = [("wte", "embeddings.word_embeddings", False),
               ("wpe", "embeddings.position_embeddings", False), ("ln_f", "final_norm", False)]
    modules += [(f"h.{i}.{h}", f"blocks.{i}.{o}", t)
                for i in range(num_layers) for h, o, t in _LAYER]
    return [(f"{hf}{h}.{p}", f"{ours}{o}.{p}", t and p == "weight") for h, o, t in modules
            for p in ("weight", "bias") if not (p == "bias" and "_embeddings" in o)]


class GPT2Adapter(HFAdapter):
    tokenizer_kind = "bpe"

    def from_hf(self, c: dict[str, Any], state: State,
                target: str | None) -> tuple[dict[str, Any], State]:
        refuse(c, add_cross_attention=True, scale_attn_by_inverse_layer_idx=True,
               scale_attn_weights=False)
        kwargs: dict[str, Any] = dict(
            vocab_size=c["vocab_size"], hidden_size=c["n_embd"], num_layers=c["n_layer"],
            num_heads=c["n_head"], ffn_hidden_size=c.get("n_inner"),
            max_position_embeddings=c.get("n_positions", 1024),
            hidden_dropout=c.get("resid_pdrop", 0.1), attention_dropout=c.get("attn_pdrop", 0.1),
            activation=activation(c, "activation_function", "gelu_new"),
            layer_norm_eps=c.get("layer_norm_epsilon", 1e-5),
            init_std=c.get("initializer_range", 0.02))
        arch = architecture(c)
        if arch == "GPT2ForSequenceClassification" or (not arch and "score.weight" in state):
            cfg_type = "GPTForSequenceClassification"  # `score.weight` keeps its name
            kwargs.update(num_classes=num_labels(c), problem_type=c.get("problem_type"),
                          pad_token_id=c.get("pad_token_id"))
        else:
            cfg_type = "GPTModel" if arch == "GPT2Model" else "GPTForCausalLM"
        ours = "" if (target or cfg_type) == "GPTModel" else "transformer."
        hf = "transformer." if any(k.startswith("transformer.") for k in state) else ""
        out: State = OrderedDict()
        for h, o, transpose in _pairs(kwargs["num_layers"], hf, ours):
            if h in state:
                value = state.pop(h)
                out[o] = value.t().contiguous() if transpose else value  # (in, out) -> (out, in)
        for i in range(kwargs["num_layers"]):
            for p in ("weight", "bias"):
                fused = state.pop(f"{hf}h.{i}.attn.c_attn.{p}", None)  # (H, 3H) or (3H,): q|k|v
                if fused is None:
                    continue
                fused = fused.t() if p == "weight" else fused  # (3H, H) or (3H,)
                for name, part in zip("qkv", fused.chunk(3, dim=0)):
                    out[f"{ours}blocks.{i}.attn.{name}_proj.{p}"] = part.contiguous()
        check_tied(state.pop("lm_head.weight", None),
                   out.get(f"{ours}embeddings.word_embeddings.weight"), "lm_head.weight")
        out.update(state)  # whatever is left keeps its name: a strict load reports it
        return {"type": cfg_type, **kwargs}, out

    def to_hf(self, model: nn.Module, a: Any, state: State) -> tuple[dict[str, Any], State]:
        arch, ours, hf = (("GPT2Model", "", "") if isinstance(model, GPTModel)
                          else ("GPT2LMHeadModel", "transformer.", "transformer."))
        classifier = isinstance(model, GPTForSequenceClassification)
        if classifier:
            arch = "GPT2ForSequenceClassification"
        out = {h: (state.pop(o).t() if t else state.pop(o))
               for h, o, t in _pairs(a["num_layers"], hf, ours) if o in state}
        for i in range(a["num_layers"]):
            for p in ("weight", "bias"):
                fused = torch.cat([state.pop(f"{ours}blocks.{i}.attn.{n}_proj.{p}") for n in "qkv"])
                out[f"{hf}h.{i}.attn.c_attn.{p}"] = fused.t() if p == "weight" else fused  # (H, 3H)
        eos = 50256 if a["vocab_size"] == 50257 else None  # GPT-2's <|endoftext|>
        config = dict(
            architectures=[arch], model_type="gpt2", vocab_size=a["vocab_size"],
            n_embd=a["hidden_size"], n_layer=a["num_layers"], n_head=a["num_heads"],
            n_inner=a["ffn_hidden_size"], n_positions=a["max_position_embeddings"],
            activation_function=ACT_TO_HF[a["activation"]], resid_pdrop=a["hidden_dropout"],
            embd_pdrop=a["hidden_dropout"], attn_pdrop=a["attention_dropout"],
            layer_norm_epsilon=a["layer_norm_eps"], initializer_range=a["init_std"],
            scale_attn_weights=True, bos_token_id=eos, eos_token_id=eos)
        if classifier:
            out["score.weight"] = state.pop("score.weight")  # the same name on both sides
            config.update(problem_type=a["problem_type"], pad_token_id=a["pad_token_id"])
        return config, out

    def export_tokenizer(self, tokenizer: Any, config: dict[str, Any],
                         a: Any) -> dict[str, str]:
        """A classifier's texts end with ``<|endoftext|>`` and its ``pad_token_id`` is the
        tokenizer's padding; GPT-2's ends of text are the tokenizer's."""
        classifier = "num_classes" in a
        files = self.tokenizer_files(tokenizer, a["max_position_embeddings"], a["vocab_size"],
                                     classifier, a["pad_token_id"] if classifier else None)
        config.update(bos_token_id=tokenizer.eod_id, eos_token_id=tokenizer.eod_id)
        return files

    def write_tokenizer(self, tokenizer: Any, max_length: int, classifier: bool,
                        pad_token_id: int | None) -> dict[str, str]:
        from tokenizers.processors import TemplateProcessing

        backend = tokenizer.backend
        pre = json.loads(backend.to_str()).get("pre_tokenizer") or {}
        specials = dict(bos_token=_EOD, eos_token=_EOD, unk_token=_EOD)
        if classifier:
            if pad_token_id == tokenizer.eod_id:
                # Hugging Face scores the last token that is not padding: the one before the
                # <|endoftext|> that ends every text, where libai (reading attention_mask) scores it
                raise ConfigError(
                    f"model.pad_token_id={pad_token_id} is {_EOD}, which ends every text of a "
                    f"GPT-2 classifier: Hugging Face, which finds the last token by the pad id, "
                    f"would score the token before it. Export with --cfg-options "
                    f"model.pad_token_id=None (Hugging Face then scores one text at a time), or "
                    f"an unused token's id (padded batches)")
            backend = type(backend).from_str(backend.to_str())  # a copy
            backend.post_processor = TemplateProcessing(
                single=f"$A {_EOD}", pair=f"$A {_EOD} $B:0 {_EOD}:0",
                special_tokens=[(_EOD, tokenizer.eod_id)])
        if pad_token_id is not None:
            pad = backend.id_to_token(pad_token_id)
            if pad is None:
                raise ConfigError(f"model.pad_token_id={pad_token_id} is no token of the "
                                  f"tokenizer ({backend.get_vocab_size(with_added_tokens=True)} "
                                  f"tokens)")
            specials["pad_token"] = pad
        config = dict(tokenizer_class="GPT2TokenizerFast", model_max_length=max_length,
                      add_prefix_space=bool(pre.get("add_prefix_space", False)), **specials)
        return {"tokenizer.json": backend.to_str(pretty=True),
                **tokenizer_configs(config, specials)}
