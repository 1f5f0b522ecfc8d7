"""The tokenizer files of a Hugging Face model folder, from a libai tokenizer.

``AutoTokenizer.from_pretrained(folder)`` then encodes text as libai's datasets do. The files:

- ``tokenizer.json``: a copy of the ``tokenizers`` backend. libai encodes without special
  tokens and its BERT datasets add [CLS] and [SEP] themselves; the copy gets BERT's
  post-processor ("[CLS] $A [SEP]", pairs "[CLS] $A [SEP] $B:1 [SEP]:1", the second segment's
  token type 1) so that Hugging Face, which adds special tokens by default, frames the text the
  same way. A GPT-2 (byte-level BPE) tokenizer is copied as it is for a language model (neither
  side adds a token); for a classifier it gets "$A <|endoftext|>" (pairs "$A <|endoftext|> $B
  <|endoftext|>"), the framing of libai's ``LabeledTextDataset``, so that the classifier scores
  the same last token in both libraries.
- ``tokenizer_config.json``: the class (``BertTokenizerFast`` / ``GPT2TokenizerFast``), the
  normalizer's options (``do_lower_case``...; ``transformers`` 5 rebuilds the normalizer from
  them), ``model_max_length`` (the model's ``max_position_embeddings``) and the special tokens;
  ``special_tokens_map.json``; ``vocab.txt`` for WordPiece (one token a line, in id order).

- Llama: ``tokenizer.json`` as it is (neither side adds a token unless the tokenizer itself
  came with a post-processor, as Meta's does), and a ``tokenizer_config.json`` of class
  ``PreTrainedTokenizerFast`` with the tokenizer's ``bos_token`` / ``eos_token`` (and
  ``pad_token`` / ``unk_token`` when it has them).
- RoBERTa (a byte-level BPE with ``<s> <pad> </s> <unk> <mask>``): ``tokenizer.json`` with
  RoBERTa's post-processor (``<s> $A </s>``, pairs ``<s> $A </s></s> $B </s>``, as Hugging
  Face frames RoBERTa's input), ``vocab.json`` + ``merges.txt`` (the slow tokenizer's files),
  and a ``tokenizer_config.json`` of class ``RobertaTokenizerFast``.

The tokenizer is read by duck typing (``.kind``, ``.backend``, ``.special_tokens`` and the
special ids of ``libai.data.text.TextTokenizer``): this module imports no data code.
"""

from __future__ import annotations

import json
from typing import Any

from libai.utils.errors import ConfigError

__all__ = ["tokenizer_files"]

_KIND_FOR = {"bert": "wordpiece", "gpt2": "bpe", "roberta": "bpe", "llama": None}  # None: any
_ROBERTA_ROLES = ("bos", "eos", "sep", "cls", "unk", "pad", "mask")
_BPE_EOD = "<|endoftext|>"


def tokenizer_files(tokenizer: Any, model_type: str, max_length: int, vocab_size: int,
                    classifier: bool = False,
                    pad_token_id: int | None = None) -> dict[str, str]:
    """File name -> text of the tokenizer files for a ``model_type`` ("bert", "gpt2", "llama"
    or "roberta") model.

    Args:
        tokenizer: A ``TextTokenizer`` (``kind`` "wordpiece" or "bpe", ``backend`` a
            ``tokenizers.Tokenizer``).
        model_type: The model's ``hf_model_type``.
        max_length: ``model_max_length``: the model's longest sequence.
        vocab_size: The model's vocabulary; the tokenizer may not give larger ids.
        classifier: A GPT-2 classifier: each text ends with ``<|endoftext|>``. Defaults to False.
        pad_token_id: A GPT-2 classifier's padding id, written as the tokenizer's
            ``pad_token`` so that Hugging Face pads batches with it. Defaults to None.

    Raises:
        ConfigError: The tokenizer is of the other kind or has more tokens than the model; or
            a GPT-2 classifier pads with ``<|endoftext|>``, which Hugging Face would not score.
    """
    kind, want = getattr(tokenizer, "kind", None), _KIND_FOR[model_type]
    if (want is not None and kind != want) or not hasattr(tokenizer, "backend"):
        raise ConfigError(
            f"a {model_type} model exports with a {want or 'BPE or WordPiece'} tokenizer "
            f"(libai's TextTokenizer), got {type(tokenizer).__name__} of kind {kind!r}: pass "
            f"the tokenizer the model was trained with")
    size = tokenizer.backend.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise ConfigError(f"the tokenizer has {size} tokens but the model {vocab_size}: its "
                          f"ids would not fit; pass the tokenizer the model was trained with")
    if model_type == "llama":
        return _llama_files(tokenizer, max_length)
    if model_type == "roberta":
        return _roberta_files(tokenizer, max_length)
    if kind == "wordpiece":
        return _wordpiece_files(tokenizer, max_length)
    return _bpe_files(tokenizer, max_length, classifier, pad_token_id)


def _wordpiece_files(tokenizer: Any, max_length: int) -> dict[str, str]:
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
    return {"tokenizer.json": backend.to_str(pretty=True), **_configs(config, specials),
            "vocab.txt": "\n".join(lines) + "\n"}


def _normalizer_options(backend: Any) -> dict[str, Any]:
    """BertTokenizer's normalizer arguments, read from the backend's normalizer."""
    normalizer = json.loads(backend.to_str()).get("normalizer") or {}
    if normalizer.get("type") == "BertNormalizer":
        return dict(do_lower_case=normalizer.get("lowercase", True),
                    strip_accents=normalizer.get("strip_accents"),
                    tokenize_chinese_chars=normalizer.get("handle_chinese_chars", True))
    return dict(do_lower_case='"Lowercase"' in json.dumps(normalizer))


def _bpe_files(tokenizer: Any, max_length: int, classifier: bool,
               pad_token_id: int | None) -> dict[str, str]:
    from tokenizers.processors import TemplateProcessing

    backend = tokenizer.backend
    pre = json.loads(backend.to_str()).get("pre_tokenizer") or {}
    specials = dict(bos_token=_BPE_EOD, eos_token=_BPE_EOD, unk_token=_BPE_EOD)
    if classifier:
        if pad_token_id == tokenizer.eod_id:
            # Hugging Face scores the last token that is not padding: the one before the
            # <|endoftext|> that ends every text, where libai (reading attention_mask) scores it
            raise ConfigError(
                f"model.pad_token_id={pad_token_id} is {_BPE_EOD}, which ends every text of a "
                f"GPT-2 classifier: Hugging Face, which finds the last token by the pad id, "
                f"would score the token before it. Export with --cfg-options "
                f"model.pad_token_id=None (Hugging Face then scores one text at a time), or an "
                f"unused token's id (padded batches)")
        backend = type(backend).from_str(backend.to_str())  # a copy
        e = _BPE_EOD
        backend.post_processor = TemplateProcessing(
            single=f"$A {e}", pair=f"$A {e} $B:0 {e}:0", special_tokens=[(e, tokenizer.eod_id)])
    if pad_token_id is not None:
        pad = backend.id_to_token(pad_token_id)
        if pad is None:
            raise ConfigError(f"model.pad_token_id={pad_token_id} is no token of the tokenizer "
                              f"({backend.get_vocab_size(with_added_tokens=True)} tokens)")
        specials["pad_token"] = pad
    config = dict(tokenizer_class="GPT2TokenizerFast", model_max_length=max_length,
                  add_prefix_space=bool(pre.get("add_prefix_space", False)), **specials)
    return {"tokenizer.json": backend.to_str(pretty=True), **_configs(config, specials)}


def _configs(config: dict[str, Any], specials: dict[str, str]) -> dict[str, str]:
    return {"tokenizer_config.json": json.dumps(config, indent=2) + "\n",
            "special_tokens_map.json": json.dumps(specials, indent=2) + "\n"}


def _llama_files(tokenizer: Any, max_length: int) -> dict[str, str]:
    roles = tokenizer.special_tokens
    specials = {f"{r}_token": roles[r] for r in ("bos", "eos", "unk", "pad") if r in roles}
    config = dict(tokenizer_class="PreTrainedTokenizerFast", model_max_length=max_length,
                  clean_up_tokenization_spaces=False, **specials)
    return {"tokenizer.json": tokenizer.backend.to_str(pretty=True), **_configs(config, specials)}


def _roberta_files(tokenizer: Any, max_length: int) -> dict[str, str]:
    from tokenizers.processors import RobertaProcessing

    roles = tokenizer.special_tokens
    missing = [r for r in _ROBERTA_ROLES if r not in roles]
    if missing:
        raise ConfigError(
            f"a roberta model exports with RoBERTa's special tokens, but the tokenizer has no "
            f"{', '.join(f'{r}_token' for r in missing)}: train it with special_tokens=['<s>', "
            f"'<pad>', '</s>', '<unk>', '<mask>'] or pass the tokenizer the model was trained with")
    data = json.loads(tokenizer.backend.to_str())
    for token in data.get("added_tokens", []):  # roberta-base's <mask> takes the space before
        if token["content"] == roles["mask"]:  # it ("the <mask>." as "the" + <mask> + ".")
            token["lstrip"] = True
    backend = type(tokenizer.backend).from_str(json.dumps(data))  # a copy
    pre = data.get("pre_tokenizer") or {}
    prefix_space = bool(pre.get("add_prefix_space", False))
    backend.post_processor = RobertaProcessing(  # (sep, cls) by position: no keywords
        (roles["sep"], tokenizer.sep_id), (roles["cls"], tokenizer.cls_id),
        trim_offsets=True, add_prefix_space=prefix_space)
    specials = {f"{r}_token": roles[r] for r in _ROBERTA_ROLES}
    config = dict(tokenizer_class="RobertaTokenizerFast", model_max_length=max_length,
                  add_prefix_space=prefix_space, trim_offsets=True, errors="replace", **specials)
    model = data["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return {"tokenizer.json": backend.to_str(pretty=True), **_configs(config, specials),
            "vocab.json": json.dumps(model["vocab"], ensure_ascii=False) + "\n",
            "merges.txt": "\n".join(["#version: 0.2", *merges]) + "\n"}
