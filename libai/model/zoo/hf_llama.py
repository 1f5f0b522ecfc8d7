"""Llama's Hugging Face adapter (``model_type`` "llama"): weights, config and tokenizer both
ways, for ``LlamaModel`` and ``LlamaForCausalLM``.

The tensors map one to one (no fused or
transposed matrices; Hugging Face's q/k rows are already in the "rotate half" order libai's RoPE
uses). An untied ``lm_head.weight`` keeps its name; a tied model's copy of the embeddings, if a
folder has one, must equal them and is dropped.

RoPE settings are read from both spellings of ``config.json``: ``rope_theta`` + ``rope_scaling``
(transformers 4, the hub's Llama folders) and ``rope_parameters`` (transformers 5). Exports
write both, so either version loads them.

The tokenizer: ``tokenizer.json`` as it is (neither side adds a token unless the tokenizer itself
came with a post-processor, as Meta's does), and a ``tokenizer_config.json`` of class
``PreTrainedTokenizerFast`` with the tokenizer's ``bos_token`` / ``eos_token`` (and
``pad_token`` / ``unk_token`` when it has them).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from torch import nn

from libai.utils.errors import CheckpointError, ConfigError

from ..layers import check_rope_scaling
from .hf_base import HFAdapter, State, architecture, check_tied, refuse, tokenizer_configs
from .llama import LlamaModel

__all__ = ["LlamaAdapter"]

# (Hugging Face module in a decoder layer, libai's in a LlamaBlock)
_LAYER = [("input_layernorm", "attn_norm"), ("self_attn.q_proj", "attn.q_proj"),
          ("self_attn.k_proj", "attn.k_proj"), ("self_attn.v_proj", "attn.v_proj"),
          ("self_attn.o_proj", "attn.out_proj"), ("post_attention_layernorm", "mlp_norm"),
          ("mlp.gate_proj", "mlp.gate_proj"), ("mlp.up_proj", "mlp.up_proj"),
          ("mlp.down_proj", "mlp.down_proj")]


def _pairs(num_layers: int, hf: str, ours: str) -> list[tuple[str, str]]:
    """(Hugging Face key, libai key) of every tensor of the decoder stack."""
    modules = [("embed_tokens", "embed_tokens"), ("norm", "final_norm")]
    modules += [(f"layers.{i}.{h}", f"blocks.{i}.{o}")
                for i in range(num_layers) for h, o in _LAYER]
    return [(f"{hf}{h}.weight", f"{ours}{o}.weight") for h, o in modules]


def _rope(c: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, rope_scaling) from either spelling of the config."""
    params = c.get("rope_parameters") or {}
    if params and "rope_type" not in params and "rope_theta" not in params:
        raise CheckpointError("config.json has rope_parameters per layer type, which libai's "
                              "Llama does not implement")
    theta = params.get("rope_theta", c.get("rope_theta", 10000.0))
    scaling = {k: v for k, v in params.items() if k != "rope_theta"} or c.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) == "default":
        scaling = None
    try:
        return theta, check_rope_scaling(scaling, "config.json rope_scaling")
    except ConfigError as e:
        raise CheckpointError(str(e)) from e


class LlamaAdapter(HFAdapter):
    def from_hf(self, c: dict[str, Any], state: State,
                target: str | None) -> tuple[dict[str, Any], State]:
        """``model=dict(type=..., ...)`` and the libai state dict of a Hugging Face Llama.

        Raises:
            CheckpointError: Biases, an activation other than SiLU, a RoPE other than the default
                or Llama 3's, or an ``lm_head`` that differs from the embeddings of a tied model.
        """
        refuse(c, attention_bias=True, mlp_bias=True)
        if c.get("hidden_act", "silu") != "silu":
            raise CheckpointError(f"config.json has hidden_act={c['hidden_act']!r}; libai's Llama "
                                  f"has SwiGLU with 'silu' only")
        theta, scaling = _rope(c)
        kwargs: dict[str, Any] = dict(
            vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
            num_layers=c["num_hidden_layers"], num_heads=c["num_attention_heads"],
            num_kv_heads=c.get("num_key_value_heads") or c["num_attention_heads"],
            head_dim=c.get("head_dim"), ffn_hidden_size=c["intermediate_size"],
            max_position_embeddings=c.get("max_position_embeddings", 2048),
            rms_norm_eps=c.get("rms_norm_eps", 1e-6), rope_theta=float(theta), rope_scaling=scaling,
            tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
            attention_dropout=float(c.get("attention_dropout", 0.0)),
            init_std=c.get("initializer_range", 0.02))
        arch = architecture(c)
        cfg_type = "LlamaModel" if arch == "LlamaModel" else "LlamaForCausalLM"
        ours = "" if (target or cfg_type) == "LlamaModel" else "transformer."
        hf = "model." if any(k.startswith("model.") for k in state) else ""
        # old files hold RoPE's frequencies, which libai computes
        state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
        out: State = OrderedDict()
        for h, o in _pairs(kwargs["num_layers"], hf, ours):
            if h in state:
                out[o] = state.pop(h)
        head = state.pop("lm_head.weight", None)
        if kwargs["tie_word_embeddings"]:
            check_tied(head, out.get(f"{ours}embed_tokens.weight"), "lm_head.weight")
        elif head is not None and ours:
            out["lm_head.weight"] = head
        out.update(state)  # whatever is left keeps its name: a strict load reports it
        return {"type": cfg_type, **kwargs}, out

    def to_hf(self, model: nn.Module, a: Any, state: State) -> tuple[dict[str, Any], State]:
        """The Hugging Face ``config.json`` dict and state dict of a libai Llama; every key it maps
        is popped from ``state``."""
        bare = isinstance(model, LlamaModel)
        ours, hf = ("", "") if bare else ("transformer.", "model.")
        out = {h: state.pop(o) for h, o in _pairs(a["num_layers"], hf, ours) if o in state}
        if not bare and not a["tie_word_embeddings"]:
            out["lm_head.weight"] = state.pop("lm_head.weight")
        heads = a["num_heads"]
        head_dim = a["head_dim"] or a["hidden_size"] // heads
        scaling = dict(a["rope_scaling"]) if a["rope_scaling"] else None
        config = dict(
            architectures=["LlamaModel" if bare else "LlamaForCausalLM"], model_type="llama",
            vocab_size=a["vocab_size"], hidden_size=a["hidden_size"],
            intermediate_size=a["ffn_hidden_size"], num_hidden_layers=a["num_layers"],
            num_attention_heads=heads, num_key_value_heads=a["num_kv_heads"] or heads,
            head_dim=head_dim, hidden_act="silu",
            max_position_embeddings=a["max_position_embeddings"], rms_norm_eps=a["rms_norm_eps"],
            rope_theta=a["rope_theta"], rope_scaling=scaling,
            rope_parameters={"rope_type": "default", **(scaling or {}),
                             "rope_theta": a["rope_theta"]},
            tie_word_embeddings=a["tie_word_embeddings"], attention_bias=False, mlp_bias=False,
            attention_dropout=a["attention_dropout"], initializer_range=a["init_std"],
            bos_token_id=None, eos_token_id=None, pad_token_id=None)
        return config, out

    def export_tokenizer(self, tokenizer: Any, config: dict[str, Any],
                         a: Any) -> dict[str, str]:
        """The tokenizer's special ids go into ``config.json``."""
        files = self.tokenizer_files(tokenizer, a["max_position_embeddings"], a["vocab_size"])
        config.update(bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.eos_id,
                      pad_token_id=tokenizer.pad_id)
        return files

    def write_tokenizer(self, tokenizer: Any, max_length: int, classifier: bool,
                        pad_token_id: int | None) -> dict[str, str]:
        roles = tokenizer.special_tokens
        specials = {f"{r}_token": roles[r] for r in ("bos", "eos", "unk", "pad") if r in roles}
        config = dict(tokenizer_class="PreTrainedTokenizerFast", model_max_length=max_length,
                      clean_up_tokenization_spaces=False, **specials)
        return {"tokenizer.json": tokenizer.backend.to_str(pretty=True),
                **tokenizer_configs(config, specials)}
