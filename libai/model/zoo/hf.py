"""Hugging Face model folders in and out of libai's model families, without importing
transformers.

A folder is ``config.json`` plus the weights: ``model.safetensors``, its sharded form
(``model.safetensors.index.json``), or ``pytorch_model.bin`` (also sharded), read with
``torch.load(weights_only=True)`` only. Its ``model_type`` names the family (``family.py``:
BERT, GPT-2, Llama, RoBERTa), whose adapter (``hf_<family>.py``) translates names, configs and
the tokenizer both ways; this module reads and writes the files and checks what fits.

- :func:`hf_to_libai` / :func:`libai_to_hf`: a config and state dict translated, no files.
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

import importlib
import json
import os
import pickle
import re
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from libai.registry import MODELS
from libai.utils.errors import CheckpointError

from ..steps import unwrap_model
from .family import ModelFamily, families, get_family
from .hf_base import HFAdapter, State, label_config

__all__ = ["adapter", "check_hf_export", "from_hf_pretrained", "hf_state_dict_for", "hf_to_libai",
           "is_hf_folder", "libai_to_hf", "load_hf_pretrained", "read_hf_folder",
           "save_hf_pretrained", "tokenizer_files"]

_IGNORED_SUFFIXES = (".position_ids", ".token_type_ids", ".attn.bias", ".attn.masked_bias")
_ADAPTERS: dict[str, HFAdapter] = {}


def adapter(family: ModelFamily | str) -> HFAdapter:
    """The Hugging Face adapter of a family (or of a ``model_type``), imported on first use from
    the dotted path its record names (the adapter imports the model file: the record cannot)."""
    family = get_family(family) if isinstance(family, str) else family
    if family.name not in _ADAPTERS:
        module, _, name = family.adapter.rpartition(".")
        _ADAPTERS[family.name] = getattr(importlib.import_module(module), name)(family)
    return _ADAPTERS[family.name]


# ----------------------------------------------------------------------------- translating
def hf_to_libai(config: dict[str, Any], hf_state: State,
                target: str | None = None) -> tuple[dict[str, Any], State]:
    """Translate a Hugging Face config and state dict to libai's, through the family's adapter.

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
    family = get_family(model_type)
    # old TensorFlow-converted BERT checkpoints name LayerNorm's weight and bias gamma and beta
    state = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta",
                                                                      "LayerNorm.bias"): v
             for k, v in hf_state.items() if not k.endswith(_IGNORED_SUFFIXES)}
    try:
        return adapter(family).from_hf(config, state, target)
    except KeyError as e:  # a dimension the config must give
        raise CheckpointError(f"config.json of this {model_type} model lacks {e}") from e


def check_hf_export(model: nn.Module) -> str:
    """``model``'s Hugging Face model type (its ``hf_model_type``).

    Raises:
        CheckpointError: The model has none; the message names the families that export.
    """
    model = unwrap_model(model)
    kind = getattr(model, "hf_model_type", None)
    if kind is None:
        titles = [f.title for f in families()]
        raise CheckpointError(
            f"{type(model).__name__} has no Hugging Face equivalent: libai exports its "
            f"{', '.join(titles[:-1])} and {titles[-1]} models (and their classifiers) only; use "
            f"the libai checkpoint as it is (load_from, tools/test.py)")
    return kind


def libai_to_hf(model: nn.Module, label_names: Sequence[str] | None = None
                ) -> tuple[dict[str, Any], State]:
    """The Hugging Face ``config.json`` dict and state dict of a libai model of a family.

    A ``second_head="sop"`` BERT exports as ``BertForPreTraining`` (the same Linear(H, 2); its
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
    family = get_family(check_hf_export(model))
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    config, out = adapter(family).to_hf(model, model.config, state)
    config.update(label_config(model, label_names))
    if state:  # every parameter must have found its Hugging Face name
        raise AssertionError(f"unmapped parameters: {sorted(state)}")
    dtype = next(iter(out.values())).dtype
    config.setdefault("tie_word_embeddings", True)  # Llama may untie its LM head
    config.update(torch_dtype=str(dtype).removeprefix("torch."))
    return config, {k: v.contiguous() for k, v in out.items()}


def tokenizer_files(tokenizer: Any, model_type: str, max_length: int, vocab_size: int,
                    classifier: bool = False, pad_token_id: int | None = None) -> dict[str, str]:
    """File name -> text of the tokenizer files of a ``model_type`` model, for
    ``AutoTokenizer.from_pretrained`` (see the family's adapter, ``hf_<family>.py``).

    Args:
        tokenizer: A ``TextTokenizer`` (``kind`` "wordpiece" or "bpe", ``backend`` a
            ``tokenizers.Tokenizer``).
        model_type: The model's ``hf_model_type``.
        max_length: ``model_max_length``: the model's longest sequence.
        vocab_size: The model's vocabulary; the tokenizer may not give larger ids.
        classifier: A GPT-2 classifier: each text ends with ``<|endoftext|>``. Defaults to False.
        pad_token_id: A GPT-2 classifier's padding id, written as the tokenizer's
            ``pad_token``. Defaults to None.

    Raises:
        ConfigError: The tokenizer is of the other kind or has more tokens than the model.
    """
    return adapter(model_type).tokenizer_files(tokenizer, max_length, vocab_size, classifier,
                                              pad_token_id)


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
            datasets do (see the family's ``hf_<family>.py``). Defaults to None: no tokenizer files.

    Returns:
        The names of the files written, in writing order.

    Raises:
        CheckpointError: No Hugging Face equivalent, safetensors missing, or the write failed.
        ConfigError: Label names that do not fit the model, or a tokenizer of the wrong kind.
    """
    config, state = libai_to_hf(model, label_names)
    files: dict[str, str] = {}
    if tokenizer is not None:
        files = adapter(config["model_type"]).export_tokenizer(
            tokenizer, config, unwrap_model(model).config)
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
                              f"from one: only libai's {', '.join(f.title for f in families())} "
                              f"models load it")
    found = config.get("model_type")
    if found != kind:
        fix = next((f.main for f in families() if f.name == found), None)
        raise CheckpointError(
            f"{where} holds a {found!r} model but the config builds {name}, a {kind!r} model: "
            + (f"set model.type='{fix}' (and its dimensions) or " if fix else "")
            + f"load a {kind} folder")
    cfg, state = hf_to_libai(config, raw, target=name)
    ours, theirs = _dims(model.config), _dims(cfg)
    # an unset GPT-2 ffn_hidden_size on both sides follows hidden_size: not a difference of its own
    derived = model.config.get("ffn_hidden_size") is None and cfg.get("ffn_hidden_size") is None
    diff = [k for k in get_family(kind).shape_args if ours.get(k) != theirs.get(k)
            and not (derived and k == "ffn_hidden_size")]
    if diff:
        raise CheckpointError(
            f"{where} has {', '.join(f'{k}={theirs[k]!r}' for k in diff)} but {name} was built "
            f"with {', '.join(f'{k}={ours.get(k)!r}' for k in diff)}: set "
            f"{' '.join(f'model.{k}={theirs[k]!r}' for k in diff)} in the config")
    return state



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
