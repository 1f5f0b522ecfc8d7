"""Hugging Face <-> libai names and configs for BERT and GPT-2: pure translation, no files.

Classes both ways: BertModel, BertForPreTraining (BertForMaskedLM), BertForSequenceClassification,
BertForTokenClassification, GPTModel (GPT2Model), GPTForCausalLM (GPT2LMHeadModel),
GPTForSequenceClassification (GPT2ForSequenceClassification). A classifier's ``num_classes``
is Hugging Face's ``num_labels`` (the size of ``id2label``), its ``problem_type`` theirs; label
names go out as ``id2label`` / ``label2id``.

Our LM heads are tied to the word embeddings: a separate Hugging Face decoder / ``lm_head`` weight
must equal them (it is then dropped); exports hold the embeddings once. GPT-2's Conv1D weights are
stored (in, out) and its q/k/v as one ``c_attn``: they are transposed and split here. ``hf.py``
reads and writes the folders.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from libai.utils.errors import CheckpointError, ConfigError
from libai.utils.suggest import did_you_mean

from ..steps import unwrap_model
from .bert import BertModel
from .bert_heads import BertForSequenceClassification, BertForTokenClassification
from .gpt import GPTForSequenceClassification, GPTModel

__all__ = ["HF_FAMILIES", "SHAPE_ARGS", "check_hf_export", "hf_to_libai", "libai_to_hf"]

State = dict[str, torch.Tensor]
_ACT_FROM_HF = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "relu": "relu"}
_ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
# kwargs that change the function a model computes: a checkpoint must agree on them. Llama's
# and RoBERTa's translations live in hf_llama.py and hf_roberta.py (imported when used)
SHAPE_ARGS = {
    "bert": ("vocab_size", "hidden_size", "num_layers", "num_heads", "ffn_hidden_size",
             "max_position_embeddings", "type_vocab_size", "activation", "layer_norm_eps",
             "pre_norm"),
    "gpt2": ("vocab_size", "hidden_size", "num_layers", "num_heads", "ffn_hidden_size",
             "max_position_embeddings", "activation", "layer_norm_eps"),
    "llama": ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
              "ffn_hidden_size", "rms_norm_eps", "rope_theta", "rope_scaling",
              "tie_word_embeddings"),
    "roberta": ("vocab_size", "hidden_size", "num_layers", "num_heads", "ffn_hidden_size",
                "max_position_embeddings", "type_vocab_size", "activation", "layer_norm_eps",
                "pad_token_id"),
}
_BERT_LAYER = [("attention.self.query", "attn.q_proj"), ("attention.self.key", "attn.k_proj"),
               ("attention.self.value", "attn.v_proj"), ("attention.output.dense", "attn.out_proj"),
               ("attention.output.LayerNorm", "attn_norm"), ("intermediate.dense", "mlp.fc1"),
               ("output.dense", "mlp.fc2"), ("output.LayerNorm", "mlp_norm")]
_BERT_HEADS = [("cls.predictions.transform.dense", "mlm_head.dense"),
               ("cls.predictions.transform.LayerNorm", "mlm_head.norm"),
               ("cls.seq_relationship", "sentence_head"), ("classifier", "classifier")]
# GPT-2 (HF module, ours, Conv1D weight to transpose)
_GPT_LAYER = [("ln_1", "attn_norm", False), ("ln_2", "mlp_norm", False),
              ("attn.c_proj", "attn.out_proj", True), ("mlp.c_fc", "mlp.fc1", True),
              ("mlp.c_proj", "mlp.fc2", True)]
_BERT_CLASSIFIERS = (BertForSequenceClassification, BertForTokenClassification)
_IGNORED_SUFFIXES = (".position_ids", ".token_type_ids", ".attn.bias", ".attn.masked_bias")


# ----------------------------------------------------------------------------- HF -> libai
def hf_to_libai(config: dict[str, Any], hf_state: State,
                target: str | None = None) -> tuple[dict[str, Any], State]:
    """Translate a Hugging Face config and state dict to libai's.

    Args:
        config: The parsed ``config.json``.
        hf_state: Its weights, Hugging Face names.
        target: The libai class the keys are for ("BertModel", "GPTForCausalLM"...). Defaults
            to the class matching the folder's ``architectures`` (and its weights).

    Returns:
        ``model`` config dict (``type`` + kwargs) and the state dict. Keys that match nothing
        are kept under their Hugging Face names, so that a strict load reports them.

    Raises:
        CheckpointError: Unsupported ``model_type`` or options, or an untied LM head.
    """
    model_type = config.get("model_type")
    if model_type not in SHAPE_ARGS:
        raise CheckpointError(
            f"model_type {model_type!r} in config.json is not supported: libai converts "
            f"{sorted(SHAPE_ARGS)}.{did_you_mean(str(model_type), SHAPE_ARGS)}")
    state = {_old_norm_name(k): v for k, v in hf_state.items() if not k.endswith(_IGNORED_SUFFIXES)}
    try:
        return _translator(model_type, "from_hf")(config, state, target)
    except KeyError as e:  # a dimension the config must give
        raise CheckpointError(f"config.json of this {model_type} model lacks {e}") from e


def _translator(model_type: str, direction: str) -> Any:
    """``<family>_from_hf`` or ``<family>_to_hf`` of a model type (``direction``: "from_hf" or
    "to_hf")."""
    if model_type == "llama":
        from . import hf_llama as module
    elif model_type == "roberta":
        from . import hf_roberta as module
    else:
        return {("bert", "from_hf"): _bert_from_hf, ("gpt2", "from_hf"): _gpt2_from_hf,
                ("bert", "to_hf"): _bert_to_hf, ("gpt2", "to_hf"): _gpt2_to_hf}[model_type, direction]
    return getattr(module, f"{model_type}_{direction}")


def _old_norm_name(key: str) -> str:  # checkpoints converted from TensorFlow BERT
    return key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")


def _act(config: dict[str, Any], key: str, default: str) -> str:
    name = config.get(key, default)
    if name not in _ACT_FROM_HF:
        raise CheckpointError(f"config.json has {key}={name!r}; libai supports "
                              f"{sorted(_ACT_FROM_HF)}")
    return _ACT_FROM_HF[name]


def _refuse(config: dict[str, Any], **unsupported: bool) -> None:
    for key, bad in unsupported.items():
        if config.get(key) is bad:
            raise CheckpointError(f"config.json has {key}={bad!r}, which libai's "
                                  f"{config['model_type']} model does not implement")


def _bert_from_hf(c: dict[str, Any], state: State, target: str | None) -> tuple[dict, State]:
    _refuse(c, is_decoder=True, add_cross_attention=True)
    if c.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"config.json has position_embedding_type="
                              f"{c['position_embedding_type']!r}; libai's BERT has 'absolute' only")
    kwargs = bert_kwargs_from_hf(c, pad_token_id=0)
    arch = (c.get("architectures") or [""])[0]
    has = {k.split(".", 1)[0] for k in state}
    pooler = any("pooler." in k for k in state)
    if arch == "BertForSequenceClassification" or (not arch and "classifier" in has and pooler):
        kwargs.update(num_classes=_num_labels(c), classifier_dropout=c.get("classifier_dropout"),
                      problem_type=c.get("problem_type"))
        cfg_type = "BertForSequenceClassification"
    elif arch == "BertForTokenClassification" or (not arch and "classifier" in has):
        kwargs.update(num_classes=_num_labels(c), classifier_dropout=c.get("classifier_dropout"))
        cfg_type = "BertForTokenClassification"
    elif arch == "BertModel" or (arch not in ("BertForPreTraining", "BertForMaskedLM")
                                 and "cls" not in has):
        cfg_type = "BertModel"
    else:
        cfg_type = "BertForPreTraining"
        kwargs["second_head"] = "nsp" if "cls.seq_relationship.weight" in state else None
    ours = "" if (target or cfg_type) == "BertModel" else "bert."
    hf = "bert." if any(k.startswith("bert.") for k in state) else ""
    out: State = OrderedDict()
    for h, o in _bert_pairs(kwargs["num_layers"], hf, ours):
        if h in state:
            out[o] = state.pop(h)
    pop_tied_mlm_head(state, out, f"{ours}embeddings.word_embeddings.weight",
                      "cls.predictions.decoder", "cls.predictions.bias")
    out.update(state)  # whatever is left keeps its name: a strict load reports it
    return {"type": cfg_type, **kwargs}, out


def bert_kwargs_from_hf(c: dict[str, Any], pad_token_id: int) -> dict[str, Any]:
    """The libai kwargs of a BERT-shaped encoder (BERT, RoBERTa) from its ``config.json``;
    absent keys take Hugging Face's defaults (``pad_token_id``: the family's)."""
    return dict(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"],
        num_layers=c["num_hidden_layers"], num_heads=c["num_attention_heads"],
        ffn_hidden_size=c["intermediate_size"],
        max_position_embeddings=c.get("max_position_embeddings", 512),
        type_vocab_size=c.get("type_vocab_size", 2),
        hidden_dropout=c.get("hidden_dropout_prob", 0.1),
        attention_dropout=c.get("attention_probs_dropout_prob", 0.1),
        activation=_act(c, "hidden_act", "gelu"), layer_norm_eps=c.get("layer_norm_eps", 1e-12),
        init_std=c.get("initializer_range", 0.02), pad_token_id=c.get("pad_token_id", pad_token_id))


def _num_labels(c: dict[str, Any]) -> int:
    """Hugging Face's ``num_labels``: the size of ``id2label`` (2 when the config has none)."""
    return len(c["id2label"]) if c.get("id2label") else c.get("num_labels", 2)


def _bert_pairs(num_layers: int, hf: str, ours: str) -> list[tuple[str, str]]:
    """(Hugging Face key, libai key) for every BERT tensor that maps one to one."""
    modules = [("embeddings.word_embeddings", "embeddings.word_embeddings"),
               ("embeddings.position_embeddings", "embeddings.position_embeddings"),
               ("embeddings.token_type_embeddings", "embeddings.token_type_embeddings"),
               ("embeddings.LayerNorm", "embeddings.norm"), ("pooler.dense", "pooler.dense")]
    modules += [(f"encoder.layer.{i}.{h}", f"blocks.{i}.{o}")
                for i in range(num_layers) for h, o in _BERT_LAYER]
    pairs = [(f"{hf}{h}.{p}", f"{ours}{o}.{p}") for h, o in modules for p in ("weight", "bias")
             if not (p == "bias" and "_embeddings" in o)]
    return pairs + [(f"{h}.{p}", f"{o}.{p}") for h, o in _BERT_HEADS for p in ("weight", "bias")]


def pop_tied_mlm_head(state: State, out: State, word_key: str, decoder: str, bias_key: str) -> None:
    """Move a masked-LM head's output bias (``bias_key``, else the decoder's) from the Hugging
    Face ``state`` to ``out["mlm_head.bias"]``, checking that the ``decoder`` Linear is the
    tied one: its weight the word embeddings (``out[word_key]``), its bias that bias."""
    decoder_w = state.pop(f"{decoder}.weight", None)
    decoder_b = state.pop(f"{decoder}.bias", None)
    bias = state.pop(bias_key, decoder_b)
    if bias is not None:
        out["mlm_head.bias"] = bias
    _check_tied(decoder_w, out.get(word_key), f"{decoder}.weight")
    _check_tied(decoder_b, bias, f"{decoder}.bias", bias_key)


def _check_tied(extra: torch.Tensor | None, tied: torch.Tensor | None, name: str,
                tied_name: str = "the word embeddings") -> None:
    if extra is not None and tied is not None and not torch.equal(extra, tied):
        raise CheckpointError(f"{name} differs from {tied_name}: libai's LM head is tied to them, "
                              f"so this checkpoint (tie_word_embeddings false?) cannot load exactly")


def _gpt2_from_hf(c: dict[str, Any], state: State, target: str | None) -> tuple[dict, State]:
    _refuse(c, add_cross_attention=True, scale_attn_by_inverse_layer_idx=True,
            scale_attn_weights=False)
    kwargs: dict[str, Any] = dict(
        vocab_size=c["vocab_size"], hidden_size=c["n_embd"], num_layers=c["n_layer"],
        num_heads=c["n_head"], ffn_hidden_size=c.get("n_inner"),
        max_position_embeddings=c.get("n_positions", 1024),
        hidden_dropout=c.get("resid_pdrop", 0.1), attention_dropout=c.get("attn_pdrop", 0.1),
        activation=_act(c, "activation_function", "gelu_new"),
        layer_norm_eps=c.get("layer_norm_epsilon", 1e-5), init_std=c.get("initializer_range", 0.02))
    arch = (c.get("architectures") or [""])[0]
    if arch == "GPT2ForSequenceClassification" or (not arch and "score.weight" in state):
        cfg_type = "GPTForSequenceClassification"  # `score.weight` keeps its name
        kwargs.update(num_classes=_num_labels(c), problem_type=c.get("problem_type"),
                      pad_token_id=c.get("pad_token_id"))
    else:
        cfg_type = "GPTModel" if arch == "GPT2Model" else "GPTForCausalLM"
    ours = "" if (target or cfg_type) == "GPTModel" else "transformer."
    hf = "transformer." if any(k.startswith("transformer.") for k in state) else ""
    out: State = OrderedDict()
    for h, o, transpose in _gpt2_pairs(kwargs["num_layers"], hf, ours):
        if h in state:
            value = state.pop(h)
            out[o] = value.t().contiguous() if transpose else value  # Conv1D (in, out) -> (out, in)
    for i in range(kwargs["num_layers"]):
        for p in ("weight", "bias"):
            fused = state.pop(f"{hf}h.{i}.attn.c_attn.{p}", None)  # (H, 3H) or (3H,): q | k | v
            if fused is None:
                continue
            fused = fused.t() if p == "weight" else fused  # (3H, H) or (3H,)
            for name, part in zip("qkv", fused.chunk(3, dim=0)):
                out[f"{ours}blocks.{i}.attn.{name}_proj.{p}"] = part.contiguous()
    _check_tied(state.pop("lm_head.weight", None), out.get(f"{ours}embeddings.word_embeddings.weight"),
                "lm_head.weight")
    out.update(state)
    return {"type": cfg_type, **kwargs}, out


def _gpt2_pairs(num_layers: int, hf: str, ours: str) -> list[tuple[str, str, bool]]:
    """(Hugging Face key, libai key, transpose) for GPT-2 tensors that map one to one (all but
    the fused c_attn)."""
    modules = [("wte", "embeddings.word_embeddings", False),
               ("wpe", "embeddings.position_embeddings", False), ("ln_f", "final_norm", False)]
    modules += [(f"h.{i}.{h}", f"blocks.{i}.{o}", t) for i in range(num_layers) for h, o, t in _GPT_LAYER]
    return [(f"{hf}{h}.{p}", f"{ours}{o}.{p}", t and p == "weight") for h, o, t in modules
            for p in ("weight", "bias") if not (p == "bias" and "_embeddings" in o)]


# ----------------------------------------------------------------------------- libai -> HF
#: The model families with a Hugging Face equivalent (``hf_model_type`` -> name).
HF_FAMILIES = {"bert": "BERT", "gpt2": "GPT-2", "llama": "Llama", "roberta": "RoBERTa"}


def check_hf_export(model: nn.Module) -> str:
    """``model``'s Hugging Face model type (its ``hf_model_type``).

    Raises:
        CheckpointError: The model has none; the message names the families that export.
    """
    model = unwrap_model(model)
    kind = getattr(model, "hf_model_type", None)
    if kind is None:
        raise CheckpointError(
            f"{type(model).__name__} has no Hugging Face equivalent: libai exports its "
            f"{', '.join(list(HF_FAMILIES.values())[:-1])} and {list(HF_FAMILIES.values())[-1]} "
            f"models (and their classifiers) only; use the libai checkpoint as it is "
            f"(load_from, tools/test.py)")
    return kind


def libai_to_hf(model: nn.Module, label_names: Sequence[str] | None = None
                ) -> tuple[dict[str, Any], State]:
    """The Hugging Face ``config.json`` dict and state dict of a libai BERT or GPT-2 model.

    A ``second_head="sop"`` model exports as ``BertForPreTraining`` (the same Linear(H, 2); its
    labels keep the SOP meaning). Tensors are detached, contiguous and on the CPU.

    Args:
        model: The model (DDP / compile wrappers are looked through).
        label_names: A classifier's class names, in class order, for ``id2label`` and
            ``label2id``. Defaults to None: ``LABEL_0``, ``LABEL_1``...

    Raises:
        CheckpointError: The model has no Hugging Face equivalent (:func:`check_hf_export`; a
            pre_norm BERT).
        ConfigError: ``label_names`` for a model without classes, or not one distinct name per
            class.
    """
    model = unwrap_model(model)
    kind = check_hf_export(model)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    config, out = _translator(kind, "to_hf")(model, model.config, state)
    config.update(_label_config(model, label_names))
    if state:  # every parameter must have found its Hugging Face name
        raise AssertionError(f"unmapped parameters: {sorted(state)}")
    dtype = next(iter(out.values())).dtype
    config.setdefault("tie_word_embeddings", True)  # Llama may untie its LM head
    config.update(torch_dtype=str(dtype).removeprefix("torch."))
    return config, {k: v.contiguous() for k, v in out.items()}


def _bert_to_hf(model: nn.Module, a: dict[str, Any], state: State) -> tuple[dict, State]:
    if a.get("pre_norm"):
        raise CheckpointError("a pre_norm=True BERT has no Hugging Face equivalent (its BERT is "
                              "post-LN): export works for pre_norm=False models")
    if isinstance(model, BertModel):
        arch, ours, hf = "BertModel", "", ""
    else:
        ours = hf = "bert."
        arch = type(model).__name__ if isinstance(model, _BERT_CLASSIFIERS) else (
            "BertForMaskedLM" if model.second_head is None else "BertForPreTraining")
    out = {h: state.pop(o) for h, o in _bert_pairs(a["num_layers"], hf, ours) if o in state}
    if "mlm_head.bias" in state:
        out["cls.predictions.bias"] = state.pop("mlm_head.bias")
    config = bert_hf_config(a, arch, "bert")
    if isinstance(model, _BERT_CLASSIFIERS):
        config["classifier_dropout"] = a["classifier_dropout"]
    if isinstance(model, BertForSequenceClassification):
        config["problem_type"] = a["problem_type"]
    return config, out


def bert_hf_config(a: Any, arch: str, model_type: str) -> dict[str, Any]:
    """The ``config.json`` of a BERT-shaped encoder (BERT, RoBERTa) from its libai config."""
    return dict(
        architectures=[arch], model_type=model_type, vocab_size=a["vocab_size"],
        hidden_size=a["hidden_size"], num_hidden_layers=a["num_layers"],
        num_attention_heads=a["num_heads"], intermediate_size=a["ffn_hidden_size"],
        hidden_act=_ACT_TO_HF[a["activation"]], hidden_dropout_prob=a["hidden_dropout"],
        attention_probs_dropout_prob=a["attention_dropout"],
        max_position_embeddings=a["max_position_embeddings"],
        type_vocab_size=a["type_vocab_size"], initializer_range=a["init_std"],
        layer_norm_eps=a["layer_norm_eps"], pad_token_id=a["pad_token_id"],
        position_embedding_type="absolute")


def _label_config(model: nn.Module, label_names: Sequence[str] | None) -> dict[str, Any]:
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


def _gpt2_to_hf(model: nn.Module, a: dict[str, Any], state: State) -> tuple[dict, State]:
    arch, ours, hf = (("GPT2Model", "", "") if isinstance(model, GPTModel)
                      else ("GPT2LMHeadModel", "transformer.", "transformer."))
    if isinstance(model, GPTForSequenceClassification):
        arch = "GPT2ForSequenceClassification"
    out = {h: (state.pop(o).t() if t else state.pop(o))
           for h, o, t in _gpt2_pairs(a["num_layers"], hf, ours) if o in state}
    for i in range(a["num_layers"]):
        for p in ("weight", "bias"):
            fused = torch.cat([state.pop(f"{ours}blocks.{i}.attn.{n}_proj.{p}") for n in "qkv"])
            out[f"{hf}h.{i}.attn.c_attn.{p}"] = fused.t() if p == "weight" else fused  # (H, 3H)
    eos = 50256 if a["vocab_size"] == 50257 else None  # GPT-2's <|endoftext|>
    config = dict(
        architectures=[arch], model_type="gpt2", vocab_size=a["vocab_size"],
        n_embd=a["hidden_size"], n_layer=a["num_layers"], n_head=a["num_heads"],
        n_inner=a["ffn_hidden_size"], n_positions=a["max_position_embeddings"],
        activation_function=_ACT_TO_HF[a["activation"]], resid_pdrop=a["hidden_dropout"],
        embd_pdrop=a["hidden_dropout"], attn_pdrop=a["attention_dropout"],
        layer_norm_epsilon=a["layer_norm_eps"], initializer_range=a["init_std"],
        scale_attn_weights=True, bos_token_id=eos, eos_token_id=eos)
    if isinstance(model, GPTForSequenceClassification):
        out["score.weight"] = state.pop("score.weight")  # the same name on both sides
        config.update(problem_type=a["problem_type"], pad_token_id=a["pad_token_id"])
    return config, out
