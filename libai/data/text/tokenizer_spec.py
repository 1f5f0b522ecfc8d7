"""The ``tokenizer=`` of a fine-tuning dataset: one value that names a tokenizer that exists.

A fine-tuned model must read its text with the tokenizer it was pretrained with, so the value
points at that tokenizer rather than training a new one:

- a path: a ``tokenizer.json``, a BERT ``vocab.txt``, or a folder holding one (a Hugging Face
  model folder: BERT, GPT-2, RoBERTa, Llama...; GPT-2's ``vocab.json`` + ``merges.txt`` too),
  its special tokens as the ``tokenizer_config.json`` beside it names them;
- ``dict(corpus="shakespeare", type="wordpiece", vocab_size=8192)``: the tokenizer built with
  that corpus (what ``configs/bert_tiny.py`` pretrained with; built into the cache on first use).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from libai.utils.errors import ConfigError

from .sources import load_corpus
from .tokenizer import TextTokenizer

__all__ = ["resolve_tokenizer"]


def resolve_tokenizer(spec: Any) -> TextTokenizer:
    """The :class:`TextTokenizer` that ``spec`` names (see the module docstring).

    Raises:
        ConfigError: ``spec`` is neither a path nor ``dict(corpus=..., type=..., vocab_size=...)``.
        DataError: The file cannot be read, or the corpus cannot be built.
    """
    if isinstance(spec, TextTokenizer):
        return spec
    if isinstance(spec, (str, os.PathLike)):
        return TextTokenizer.load(spec)
    if isinstance(spec, Mapping) and "corpus" in spec:
        options = {k: v for k, v in spec.items() if k != "corpus"}
        return load_corpus(spec["corpus"], tokenizer=options).tokenizer
    raise ConfigError(
        f"tokenizer={spec!r}: give the tokenizer the model was pretrained with: a path "
        f"(tokenizer.json, vocab.txt, or a Hugging Face model folder), or "
        f"dict(corpus='shakespeare', type='wordpiece', vocab_size=8192) for the one a shipped "
        f"config built with its corpus.")
