"""Hugging Face model folders in and out of libai's BERT and GPT-2, without importing transformers.

A folder is ``config.json`` plus the weights: ``model.safetensors``, its sharded form
(``model.safetensors.index.json``), or ``pytorch_model.bin`` (also sharded), read with
``torch.load(weights_only=True)`` only. Supported: ``model_type`` "bert" (BertModel,
BertForPreTraining, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification)
and "gpt2" (GPT2Model, GPT2LMHeadModel, GPT2ForSequenceClassification). The name and config
translation is in ``hf_mapping.py``, the tokenizer files in ``hf_tokenizer.py``.

- :func:`load_hf_pretrained` (folder -> ``model=dict(type=..., ...)`` and a libai state dict) and
  :func:`from_hf_pretrained` (folder -> a built model).
- :func:`save_hf_pretrained` (model -> folder that ``transformers`` loads with
  ``from_pretrained``, the embeddings written once with ``tie_word_embeddings: true``; a
  classifier's label names, and the tokenizer that ``AutoTokenizer`` loads); needs
  ``safetensors``.
- :func:`hf_state_dict_for` (the state dict for an already built model, checked against it):
  what ``load_from=HF_FOLDER`` uses.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from libai.registry import MODELS
from libai.utils.errors import CheckpointError, ConfigError

from ..steps import unwrap_model
from .hf_mapping import HF_FAMILIES, SHAPE_ARGS, hf_to_libai, libai_to_hf
from .hf_tokenizer import tokenizer_files

__all__ = ["from_hf_pretrained", "hf_state_dict_for", "hf_to_libai", "is_hf_folder",
           "libai_to_hf", "load_hf_pretrained", "read_hf_folder", "save_hf_pretrained"]

State = dict[str, torch.Tensor]


# ----------------------------------------------------------------------------- reading
def is_hf_folder(path: Any) -> bool:
    """Whether ``path`` is a folder holding a ``config.json``."""
    return isinstance(path, str | os.PathLike) and os.path.isfile(os.path.join(path, "config.json"))


def read_hf_folder(folder: str | os.PathLike) -> tuple[dict[str, Any], State]:
    """The parsed ``config.json`` and the raw (Hugging Face named) weights of ``folder``.

    Raises:
        CheckpointError: No folder, no config, unreadable JSON, or no weight file.
    """
    folder = os.fspath(folder)
    if not is_hf_folder(folder):
        raise CheckpointError(f"{folder!r} is not a Hugging Face model folder (no config.json "
                              f"there): pass the folder that save_pretrained wrote")
    try:
        with open(os.path.join(folder, "config.json")) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read {folder}/config.json: {e}") from e
    for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return config, _read_weights(path)
    raise CheckpointError(f"{folder!r} has a config.json but no model.safetensors or "
                          f"pytorch_model.bin (or their .index.json): nothing to load")


def _read_weights(path: str) -> State:
    try:
        if path.endswith(".index.json"):  # sharded: the index maps each key to its shard file
            with open(path) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            state: State = {}
            for shard in shards:
                state.update(_read_weights(os.path.join(os.path.dirname(path), shard)))
            return state
        if path.endswith(".safetensors"):
            st = _safetensors()
            try:
                return dict(st.torch.load_file(path))
            except st.SafetensorError as e:
                raise ValueError(str(e)) from e
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(_unsafe_bin_line(path, e)) from e
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        raise CheckpointError(f"cannot read weights from {path}: {e}") from e


def _unsafe_bin_line(path: str, e: pickle.UnpicklingError) -> str:
    """One line for a ``pytorch_model.bin`` that ``weights_only=True`` refuses: it stores objects
    beside the tensors, and unpickling those would run code the file names."""
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)|(Unsupported[^\n.]*)", str(e))
    what = ((f"it stores an object of class {found.group(1)}" if found.group(1) else found.group(2).strip())
            if found else (str(e).strip().splitlines() or ["refused"])[0][:200])
    folder = os.path.dirname(path) or "."
    return (f"{path} is a pickle that torch.load(weights_only=True) refuses ({what}): libai loads "
            f"only tensors and never runs code stored in a weights file, and has no option to "
            f"trust one. Convert the folder to safetensors where you trust it: "
            f"python -c \"import torch, safetensors.torch as st; st.save_file({{k: v.contiguous() "
            f"for k, v in torch.load('{path}', weights_only=False).items() if "
            f"isinstance(v, torch.Tensor)}}, '{os.path.join(folder, 'model.safetensors')}')\" "
            f"(model.safetensors is read first), or load it with transformers and save_pretrained "
            f"it again.")


def _safetensors() -> Any:
    """The ``safetensors`` package (with ``safetensors.torch`` loaded), an optional dependency."""
    try:
        import safetensors
        import safetensors.torch
    except ImportError as e:
        raise CheckpointError("reading/writing model.safetensors needs the safetensors package: "
                              "pip install safetensors") from e
    return safetensors


# ----------------------------------------------------------------------------- writing
def save_hf_pretrained(model: nn.Module, folder: str | os.PathLike,
                       label_names: Sequence[str] | None = None,
                       tokenizer: Any = None) -> list[str]:
    """Write ``config.json`` and ``model.safetensors`` that ``transformers`` loads with
    ``from_pretrained`` (``BertForPreTraining``, ``BertForSequenceClassification``,
    ``GPT2LMHeadModel``...), and the tokenizer files when a tokenizer is given.

    The weights and the tokenizer go first, the config last: a folder counts as complete once
    ``config.json`` is there. Each file is written under a temporary name and renamed.

    Args:
        model: A libai BERT or GPT-2 model.
        folder: Where to write (created if needed).
        label_names: A classifier's class names in class order: ``id2label`` and ``label2id``.
            Defaults to None: ``LABEL_0``, ``LABEL_1``...
        tokenizer: The ``TextTokenizer`` the model reads with: ``tokenizer.json``,
            ``tokenizer_config.json``, ``special_tokens_map.json`` (and ``vocab.txt`` for
            WordPiece), so that ``AutoTokenizer.from_pretrained(folder)`` encodes as libai's
            datasets do (see ``hf_tokenizer.py``). Defaults to None: no tokenizer files.

    Returns:
        The names of the files written, in writing order.

    Raises:
        CheckpointError: No Hugging Face equivalent, safetensors missing, or the write failed.
        ConfigError: Label names that do not fit the model, or a tokenizer of the wrong kind.
    """
    config, state = libai_to_hf(model, label_names)
    files: dict[str, str] = {}
    if tokenizer is not None:
        files = _tokenizer_files(config, unwrap_model(model).config, tokenizer)
    files["config.json"] = json.dumps(config, indent=2, sort_keys=True) + "\n"
    st, folder = _safetensors().torch, os.fspath(folder)
    try:
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, ".model.tmp")
        st.save_file(state, tmp, metadata={"format": "pt"})
        os.replace(tmp, os.path.join(folder, "model.safetensors"))
        for name, text in files.items():
            tmp = os.path.join(folder, f".{name}.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, os.path.join(folder, name))
    except OSError as e:
        raise CheckpointError(f"could not write the Hugging Face folder {folder!r}: {e}") from e
    return ["model.safetensors", *files]


def _tokenizer_files(config: dict[str, Any], a: dict[str, Any], tokenizer: Any) -> dict[str, str]:
    """The tokenizer files of an export; ``config`` (the ``config.json`` dict) takes the
    tokenizer's special ids: GPT-2's and Llama's ends of text, RoBERTa's ``<s>`` / ``</s>``.

    Raises:
        ConfigError: See :func:`tokenizer_files`; or a RoBERTa whose ``pad_token_id`` is not
            the tokenizer's padding (its positions count from it).
    """
    kind = config["model_type"]
    classifier = kind == "gpt2" and "num_classes" in a
    pad = a["pad_token_id"] if classifier else None  # BERT's is always [PAD]
    longest = a["max_position_embeddings"]
    if kind == "roberta":  # positions start after the padding index: 514 -> 512 tokens
        longest -= a["pad_token_id"] + 1
    files = tokenizer_files(tokenizer, kind, longest, a["vocab_size"], classifier, pad)
    if kind == "gpt2":  # GPT-2's ends of text are the tokenizer's
        config.update(bos_token_id=tokenizer.eod_id, eos_token_id=tokenizer.eod_id)
    elif kind == "llama":
        config.update(bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.eos_id,
                      pad_token_id=tokenizer.pad_id)
    elif kind == "roberta":
        if tokenizer.pad_id != a["pad_token_id"]:
            raise ConfigError(
                f"the tokenizer pads with id {tokenizer.pad_id} but the RoBERTa model has "
                f"pad_token_id={a['pad_token_id']}, from which its positions count: pass the "
                f"tokenizer the model was trained with")
        config.update(bos_token_id=tokenizer.bos_id, eos_token_id=tokenizer.eos_id)
    return files


# ----------------------------------------------------------------------------- loading
def load_hf_pretrained(folder: str | os.PathLike) -> tuple[dict[str, Any], State]:
    """``model=dict(type=..., ...)`` for a config, and the libai state dict, of an HF folder."""
    return hf_to_libai(*read_hf_folder(folder))


def from_hf_pretrained(folder: str | os.PathLike, **overrides: Any) -> nn.Module:
    """Build the libai model a Hugging Face folder describes, with its weights.

    The model is built on the meta device and takes the loaded tensors as its parameters (no
    random init, no copy).

    Args:
        folder: The Hugging Face folder.
        **overrides: Model kwargs to change (e.g. ``hidden_dropout=0.0``); not the dimensions.

    Raises:
        CheckpointError: See :func:`read_hf_folder` and :func:`hf_to_libai`; or the weights do
            not fill the model exactly (missing, unexpected or misshapen tensors).
    """
    cfg, state = load_hf_pretrained(folder)
    with torch.device("meta"):
        model = MODELS.build({**cfg, **overrides})
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in state.items()}
    if expected != got:
        bad = sorted(set(expected) ^ set(got)) or [k for k in expected if expected[k] != got[k]]
        raise CheckpointError(f"the weights in {os.fspath(folder)!r} do not fill {cfg['type']}: "
                              f"{len(bad)} tensor(s) missing, unexpected or misshapen, e.g. {bad[:4]}")
    model.load_state_dict(state, assign=True)
    return model


def hf_state_dict_for(model: nn.Module, folder: str | os.PathLike) -> State:
    """The state dict of an HF folder for an already built libai ``model``, after checking that
    the folder holds that kind of model with the same dimensions (``load_from=HF_FOLDER``).

    Heads are not checked here: a strict load reports them (``strict=False`` loads a
    pretraining checkpoint into a classifier).

    Raises:
        CheckpointError: Not a BERT/GPT-2 model, another ``model_type``, or other dimensions
            (the message names the model.* values to set).
    """
    model = unwrap_model(model)
    name, kind = type(model).__name__, getattr(model, "hf_model_type", None)
    config, raw = read_hf_folder(folder)
    where = f"load_from={os.fspath(folder)!r}"
    if kind is None:
        raise CheckpointError(f"{where} is a Hugging Face folder but {name} has no conversion "
                              f"from one: only libai's {', '.join(_FAMILIES.values())} models "
                              f"load it")
    found = config.get("model_type")
    if found != kind:
        fix = {"bert": "BertForPreTraining", "gpt2": "GPTForCausalLM",
               "llama": "LlamaForCausalLM", "roberta": "RobertaForMaskedLM"}.get(found)
        raise CheckpointError(
            f"{where} holds a {found!r} model but the config builds {name}, a {kind!r} model: "
            + (f"set model.type='{fix}' (and its dimensions) or " if fix else "")
            + f"load a {kind} folder")
    cfg, state = hf_to_libai(config, raw, target=name)
    ours, theirs = _dims(model.config), _dims(cfg)
    # an unset GPT-2 ffn_hidden_size on both sides follows hidden_size: not a difference of its own
    derived = model.config.get("ffn_hidden_size") is None and cfg.get("ffn_hidden_size") is None
    diff = [k for k in SHAPE_ARGS[kind] if ours.get(k) != theirs.get(k)
            and not (derived and k == "ffn_hidden_size")]
    if diff:
        raise CheckpointError(
            f"{where} has {', '.join(f'{k}={theirs[k]!r}' for k in diff)} but {name} was built "
            f"with {', '.join(f'{k}={ours.get(k)!r}' for k in diff)}: set "
            f"{' '.join(f'model.{k}={theirs[k]!r}' for k in diff)} in the config")
    return state


_FAMILIES = HF_FAMILIES


def _dims(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    if out.get("ffn_hidden_size") is None and "hidden_size" in out:  # GPT-2's default
        out["ffn_hidden_size"] = 4 * out["hidden_size"]
    if "num_kv_heads" in out:  # Llama's defaults: as many KV heads as heads, H / heads wide
        if out.get("num_kv_heads") is None:
            out["num_kv_heads"] = out["num_heads"]
        if out.get("head_dim") is None:
            out["head_dim"] = out["hidden_size"] // out["num_heads"]
    out.setdefault("pre_norm", False)
    return out
