"""Which token of a tokenizer plays which special role (padding, unknown, [CLS], end of text...).

A role is found, for each tokenizer, from:

1. the Hugging Face files beside a loaded ``tokenizer.json``: ``tokenizer_config.json`` and
   ``special_tokens_map.json`` (keys ``bos_token``, ``eos_token``, ``pad_token``,
   ``unk_token``, ``mask_token``, ``cls_token``, ``sep_token``; a value is the token's text,
   or a dict with its ``"content"``), the config winning where both name a role;
2. else the conventions of the tokenizer families, the first family whose signature tokens
   are all in the vocabulary (see :data:`FAMILIES`): BERT ``[PAD] [UNK] [CLS] [SEP] [MASK]``;
   RoBERTa ``<s> <pad> </s> <unk> <mask>`` (``<s>`` starts and classifies, ``</s>`` separates
   and ends); Llama-3 ``<|begin_of_text|>`` / ``<|end_of_text|>`` (or ``<|eot_id|>``);
   Llama-2 ``<s> </s> <unk>``; GPT-2 ``<|endoftext|>`` (begins and ends text).

The end of a document (``eod``, what GPT pretraining puts between documents) is the end of
sequence token, else BERT's separator. A role the tokenizer lacks is None; a dataset that
needs it says which token is missing (:func:`missing_roles_line`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from libai.utils.errors import DataError

__all__ = ["ROLES", "FAMILIES", "HF_KEYS", "beside", "convention_roles", "declared_role_files",
           "missing_roles_line", "read_declared_roles", "resolve_roles"]

ROLES = ("pad", "unk", "cls", "sep", "mask", "bos", "eos")

# (family, signature tokens that must all exist, role -> candidate tokens, the first present wins)
FAMILIES: tuple[tuple[str, tuple[str, ...], dict[str, tuple[str, ...]]], ...] = (
    ("BERT", ("[CLS]", "[SEP]"),
     dict(pad=("[PAD]",), unk=("[UNK]",), cls=("[CLS]",), sep=("[SEP]",), mask=("[MASK]",))),
    ("RoBERTa", ("<s>", "</s>", "<mask>"),
     dict(pad=("<pad>",), unk=("<unk>",), cls=("<s>",), sep=("</s>",), mask=("<mask>",),
          bos=("<s>",), eos=("</s>",))),
    ("Llama-3", ("<|begin_of_text|>",),
     dict(bos=("<|begin_of_text|>",), eos=("<|end_of_text|>", "<|eot_id|>"))),
    ("Llama-2", ("<s>", "</s>"), dict(bos=("<s>",), eos=("</s>",), unk=("<unk>",))),
    ("GPT-2", ("<|endoftext|>",), dict(bos=("<|endoftext|>",), eos=("<|endoftext|>",))),
)

_CONFIG_FILES = ("special_tokens_map.json", "tokenizer_config.json")  # later files win

# What each role is called in messages and in Hugging Face's files
HF_KEYS = {role: f"{role}_token" for role in ROLES}


def convention_roles(vocab: Mapping[str, int] | set[str],
                     specials: set[str]) -> tuple[str | None, dict[str, str]]:
    """``(family, role -> token)`` by the first family of :data:`FAMILIES` whose signature
    tokens are all special tokens of the tokenizer; failing that, all in its vocabulary (GPT-2's
    ``vocab.json`` does not mark ``<|endoftext|>`` special). ``(None, {})`` when none is.

    Special tokens first: a byte-level BPE may well learn ``<s>`` from its text as an ordinary
    token, which must not make a GPT-2 tokenizer a Llama-2 one.
    """
    for pool in (specials, vocab):
        for family, signature, candidates in FAMILIES:
            if all(t in pool for t in signature):
                roles = {}
                for role, tokens in candidates.items():
                    found = next((t for t in tokens if t in vocab), None)
                    if found is not None:
                        roles[role] = found
                return family, roles
    return None, {}


def declared_role_files(path: Path) -> list[Path]:
    """The files that may name the roles of the tokenizer file ``path``: a Hugging Face
    folder's ``special_tokens_map.json`` and ``tokenizer_config.json`` beside a
    ``tokenizer.json`` / ``vocab.txt``; ``X.special_tokens_map.json`` beside any other
    ``X.tokenizer.json`` (what :meth:`TextTokenizer.save` writes), later files winning."""
    if path.is_dir() or path.name in ("tokenizer.json", "vocab.txt"):
        folder = path if path.is_dir() else path.parent
        return [folder / name for name in _CONFIG_FILES]
    return [beside(path, "special_tokens_map.json")]


def beside(path: Path, name: str) -> Path:
    """``name`` next to the tokenizer file ``path``, sharing its prefix:
    ``tokenizer.json`` -> ``name``, ``corpus.tokenizer.json`` -> ``corpus.<name>``,
    ``t.json`` -> ``t.<name>``."""
    other = path.with_name(path.name.replace("tokenizer.json", name))
    return other if other != path else path.with_suffix("." + name)


def read_declared_roles(files: list[Path]) -> dict[str, str]:
    """Role -> token text as ``files`` (those that exist) declare them, later files winning.

    Raises:
        DataError: A file that is there but is not readable JSON.
    """
    roles: dict[str, str] = {}
    for path in files:
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DataError(f"Cannot read {path}: {e}") from e
        if not isinstance(data, Mapping):
            raise DataError(f"{path} is not a JSON object: cannot read its special tokens.")
        for role in ROLES:
            value = data.get(HF_KEYS[role])
            if isinstance(value, Mapping):
                value = value.get("content")
            if isinstance(value, str) and value:
                roles[role] = value
    return roles


def resolve_roles(vocab: Mapping[str, int], specials: set[str],
                  declared: Mapping[str, str] | None = None,
                  source: str | None = None) -> dict[str, str]:
    """Role -> token text: the declared roles over the family conventions.

    Args:
        vocab: The tokenizer's vocabulary, added tokens included.
        specials: The texts of its special (added) tokens.
        declared: Roles named by the tokenizer's files or by the caller. Defaults to None.
        source: The tokenizer's name, for messages. Defaults to None.

    Raises:
        DataError: A declared role names a token that is not in the vocabulary.
    """
    _, roles = convention_roles(vocab, specials)
    for role, token in (declared or {}).items():
        if role not in ROLES:
            raise DataError(f"Unknown special token role {role!r}; roles: {', '.join(ROLES)}.")
        if token not in vocab:
            raise DataError(
                f"Tokenizer {source or ''}: {HF_KEYS[role]}={token!r} is not in its vocabulary "
                f"({len(vocab)} tokens): fix tokenizer_config.json / special_tokens_map.json.")
        roles[role] = token
    return roles


def missing_roles_line(roles: Mapping[str, Any], needed: tuple[str, ...], user: str,
                       source: str | None) -> str | None:
    """One line for the roles of ``needed`` that ``roles`` lacks (None when none is missing)."""
    missing = [r for r in needed if roles.get(r) is None]
    if not missing:
        return None
    names = ", ".join(_describe(r) for r in missing)
    return (f"{user} needs the tokenizer's {names}, but tokenizer {source or ''} has none: "
            f"name it in tokenizer_config.json beside tokenizer.json (e.g. "
            f"\"{HF_KEYS[missing[0]] if missing[0] != 'eod' else 'eos_token'}\": \"...\"), or "
            f"use a tokenizer that has it.")


def _describe(role: str) -> str:
    if role == "eod":
        return "end-of-document token (eos_token, or [SEP] / <|endoftext|>)"
    return f"{role} token ({HF_KEYS[role]})"
