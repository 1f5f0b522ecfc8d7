"""Instruction tuning for decoders: :class:`InstructionDataset` and :func:`instruction_collate`.

::

    dataset = dict(
        type="InstructionDataset",
        data_files=dict(train="data/train.jsonl", val="data/val.jsonl"),  # or "shakespeare_instruct"
        split="train",
        tokenizer=dict(corpus="shakespeare", type="bpe", vocab_size=8192),  # the model's
        template="alpaca",        # or "chat", or dict(system=..., user=..., assistant=...)
        max_seq_length=128,
        packing=False,
    )
    collate_fn = "instruction_collate"

A record is one JSON line: ``{"prompt": ..., "response": ...}`` (the keys are ``prompt_key`` and
``response_key``) or a conversation ``{"messages": [{"role": "system" | "user" | "assistant",
"content": ...}, ...]}``. The template turns each turn into text: its role's format string with
the turn's text in place of ``{content}``; an assistant turn is followed by the tokenizer's
end-of-text id (``eod_id``). Each part is tokenized on its own, so the prompt a model
is later given (:func:`encode_prompt`) tokenizes exactly as in training.

The loss counts the response tokens only (an assistant turn's text and its end-of-text id), as
TRL's ``DataCollatorForCompletionOnlyLM`` does: ``labels[t]`` is the token after
``input_ids[t]`` (libai's GPT takes labels already shifted) where that token is a response
token, and -100 everywhere else (the template, the prompt, padding).

An example longer than ``max_seq_length + 1`` tokens keeps its start (the whole prompt) and as
much of the response as fits; one whose response does not fit at all is dropped, and the count
is logged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from libai.registry import COLLATE_FUNCTIONS, DATASETS
from libai.utils.errors import ConfigError, DataError
from libai.utils.logging import print_log
from libai.utils.suggest import did_you_mean, unknown

from .instruction_sets import BUILTIN_INSTRUCTION_SETS, shakespeare_instructions
from .records import read_records, split_file
from .tokenizer import TOKENIZER_KINDS, TextTokenizer
from .tokenizer_spec import resolve_tokenizer

__all__ = ["DEFAULT_TEMPLATE", "TEMPLATES", "InstructionDataset", "encode_prompt",
           "instruction_collate", "resolve_template"]

# Alpaca's layout without its preamble, and a ChatML-like one with role tags
TEMPLATES = {
    "alpaca": {"system": "{content}\n\n", "user": "### Instruction:\n{content}\n\n",
               "assistant": "### Response:\n{content}"},
    "chat": {"system": "<|system|>\n{content}\n", "user": "<|user|>\n{content}\n",
             "assistant": "<|assistant|>\n{content}"},
}
DEFAULT_TEMPLATE = "alpaca"
ROLES = ("system", "user", "assistant")
_IGNORE = -100  # label value cross_entropy skips
_SPLITS = ("train", "val", "test")


def resolve_template(template: str | Mapping[str, str]) -> dict[str, str]:
    """The format strings of a template: a name in :data:`TEMPLATES` or a dict of them.

    A dict needs ``user`` and ``assistant``, each holding ``{content}`` once; ``system``
    defaults to ``user``'s.

    Raises:
        ConfigError: An unknown name, a missing role, or a string without ``{content}``.
    """
    if isinstance(template, str):
        if template not in TEMPLATES:
            raise ConfigError(f"template={template!r} is unknown.{did_you_mean(template, TEMPLATES)}"
                              f" Choose {' or '.join(map(repr, TEMPLATES))}, or give "
                              f"dict(user='...{{content}}...', assistant='...{{content}}').")
        return dict(TEMPLATES[template])
    if not isinstance(template, Mapping):
        raise ConfigError(f"template={template!r}: give a name ({', '.join(TEMPLATES)}) or a dict "
                          f"of format strings.")
    out = {str(k): v for k, v in template.items()}
    extra = [k for k in out if k not in ROLES]
    if extra:
        raise ConfigError(unknown(f"template={template!r}: unknown role {extra[0]!r}", extra[0],
                                  ROLES, "Its keys are"))
    out.setdefault("system", out.get("user"))
    for role in ROLES:
        text = out.get(role)
        if not isinstance(text, str) or text.count("{content}") != 1:
            raise ConfigError(f"template={template!r}: {role!r} must be a string holding "
                              f"'{{content}}' once (where the turn's text goes).")
    return out


def encode_turns(tokenizer: TextTokenizer, template: Mapping[str, str],
                 messages: Sequence[tuple[str, str]]) -> tuple[list[int], list[bool]]:
    """``(ids, trained)`` of ``(role, text)`` turns framed by a resolved template: the token ids
    and, per token, whether it is a response token (an assistant turn's text and the ``eod_id``
    after it; not its header)."""
    texts, trained = _segments(template, messages)
    return _join(tokenizer.encode_batch(texts) if texts else [], trained, tokenizer.eod_id)


def encode_prompt(tokenizer: TextTokenizer, template: str | Mapping[str, str],
                  instruction: str, system: str | None = None) -> list[int]:
    """The ids a model continues to answer ``instruction``: the user turn and the assistant
    header, tokenized as :class:`InstructionDataset` tokenizes them."""
    turns = ([("system", system)] if system else []) + [("user", instruction), ("assistant", "")]
    ids, trained = encode_turns(tokenizer, resolve_template(template), turns)
    return ids[: trained.index(True)]  # up to the empty response and its end-of-text id


def _segments(template: Mapping[str, str], messages: Sequence[tuple[str, str]]
              ) -> tuple[list[str], list[bool | None]]:
    """The texts to tokenize on their own, each marked True (trained), False, or None (the
    end-of-text id goes there)."""
    texts: list[str] = []
    trained: list[bool | None] = []
    for role, content in messages:
        if role == "assistant":
            head, tail = template["assistant"].split("{content}")
            texts += [head, content + tail, ""]
            trained += [False, True, None]
        else:
            texts.append(template[role].replace("{content}", content))
            trained.append(False)
    return texts, trained


def _join(pieces: Sequence[list[int]], trained: Sequence[bool | None], eod_id: int
          ) -> tuple[list[int], list[bool]]:
    """The tokenized segments of :func:`_segments` as one sequence, with its response mask."""
    ids: list[int] = []
    mask: list[bool] = []
    for piece, train in zip(pieces, trained):
        if train is None:  # the end of an assistant turn
            piece = [eod_id]
        ids += piece
        mask += [train is not False] * len(piece)
    return ids, mask


@DATASETS.register_module()
class InstructionDataset(Dataset):
    """Prompt/response or chat records, tokenized with a template, trained on the responses.

    See the module docstring for the records, the template and the labels.

    Two ways to batch, both through :func:`instruction_collate`:

    - ``packing=False``: one example per row; the collator pads a batch to its longest example
      (right padding; ``attention_mask`` 0 there).
    - ``packing=True``: the examples (in an order drawn from ``seed``) are concatenated and cut
      into rows of exactly ``max_seq_length`` tokens; an example may run on into the next row.
      As in TRL's default packing, attention crosses example boundaries (a causal model sees
      the previous examples of its row) and positions count from the row's start; labels never
      cross: the last token of an example (its end-of-text id) predicts nothing. Only the last
      row has padding.

    Args:
        data_files: ``dict(train=..., val=..., test=...)`` JSON-lines paths; one path (its
            records are the split); or ``"shakespeare_instruct"`` (the built-in set,
            libai.data.text.instruction_sets).
        tokenizer: The model's tokenizer (libai.data.text.tokenizer_spec): a path, a Hugging
            Face folder, or ``dict(corpus="shakespeare", type="bpe", vocab_size=8192)``.
        split: Which entry of ``data_files`` (or split of the built-in set). Defaults to "train".
        template: A name in :data:`TEMPLATES` or a dict of format strings. Defaults to "alpaca".
        max_seq_length: Tokens per row (``input_ids``). Defaults to 512.
        packing: Pack examples into full rows. Defaults to False.
        prompt_key: The key of a record's prompt. Defaults to "prompt".
        response_key: The key of a record's response. Defaults to "response".
        messages_key: The key of a conversation; a record holding it is read as one.
            Defaults to "messages".
        seed: The order of the examples in packed rows. Defaults to 0.

    Attributes:
        lengths: Tokens per row, (len,) int64 (``LengthGroupedSampler`` batches rows of similar
            length together, so padding mode pads little).
        num_dropped: Examples left out: their prompt fills ``max_seq_length``.
        metainfo: ``vocab_size`` and ``max_seq_length`` (the runner checks them against the
            model), ``tokenizer`` (its source), ``template`` (the format strings), ``eod_id``.

    Raises:
        ConfigError: A bad argument.
        DataError: A missing or empty file, a record without the keys, a bad conversation, or
            no example whose response fits ``max_seq_length``.
    """

    def __init__(self, data_files: str | os.PathLike | Mapping[str, Any], tokenizer: Any,
                 split: str = "train", template: str | Mapping[str, str] = DEFAULT_TEMPLATE,
                 max_seq_length: int = 512, packing: bool = False, prompt_key: str = "prompt",
                 response_key: str = "response", messages_key: str = "messages",
                 seed: int = 0) -> None:
        name = type(self).__name__
        for key, value, low in (("max_seq_length", max_seq_length, 1), ("seed", seed, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name}: {key}={value!r}: give an int >= {low}.")
        if not isinstance(packing, bool):
            raise ConfigError(f"{name}: packing={packing!r}: give True or False.")
        for key, value in (("prompt_key", prompt_key), ("response_key", response_key),
                           ("messages_key", messages_key), ("split", split)):
            if not isinstance(value, str):
                raise ConfigError(f"{name}: {key}={value!r}: give a string.")
        try:
            self.template = resolve_template(template)
        except ConfigError as e:
            raise ConfigError(f"{name}: {e}") from e
        records, self.name = _load(data_files, split), _source_name(data_files, split)
        self.tokenizer = _tokenizer(tokenizer, name)
        self.tokenizer.require("eod", user=name)  # ends every response
        self.max_seq_length, self.packing, self.seed = max_seq_length, packing, seed
        self.keys = (prompt_key, response_key, messages_key)
        examples, dropped = self._encode(records)
        if not examples:
            raise DataError(f"{self.name}: none of its {len(records):,} examples has a response "
                            f"token within max_seq_length={max_seq_length} (the prompts are "
                            f"longer): raise max_seq_length or shorten the prompts.")
        self.rows = _pack(examples, max_seq_length, seed) if packing else [
            {"input_ids": ids[:-1], "labels": labels[:-1]} for ids, labels in examples]
        tokens = sum(len(ids) - 1 for ids, _ in examples)
        trained = sum(int((labels != _IGNORE).sum()) for _, labels in examples)
        print_log(f"{self.name}: {len(examples):,} examples, {tokens / len(examples):.0f} tokens "
                  f"on average, {trained / max(tokens, 1):.0%} of them trained (the responses)"
                  + (f", packed into {len(self.rows):,} rows of {max_seq_length}" if packing else "")
                  + (f"; {dropped:,} dropped: the prompt fills max_seq_length={max_seq_length}"
                     if dropped else ""))
        self.num_dropped = dropped
        self.lengths = np.array([len(row["input_ids"]) for row in self.rows], dtype=np.int64)
        self.metainfo = {"vocab_size": self.tokenizer.vocab_size, "max_seq_length": max_seq_length,
                         "tokenizer": self.tokenizer.source, "template": self.template,
                         "eod_id": self.tokenizer.eod_id,
                         "collate_fn": "instruction_collate"}  # items differ in length

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return self.rows[index]

    def messages(self, record: Mapping[str, Any]) -> list[tuple[str, str]]:
        """The ``(role, text)`` turns of a record.

        Raises:
            DataError: The record lacks the keys, or its conversation is malformed.
        """
        prompt_key, response_key, messages_key = self.keys
        where = record.get("_where", "a record")
        if messages_key in record:
            return _conversation(record[messages_key], where, messages_key)
        have = [k for k in record if k != "_where"]
        for key, option in ((prompt_key, "prompt_key"), (response_key, "response_key")):
            if key not in record:
                raise DataError(f"{where} has no {key!r} key.{did_you_mean(key, have)} Its keys: "
                                f"{', '.join(have) or 'none'}; name yours with {option}=..., or "
                                f"give a conversation as {messages_key!r}.")
            if not isinstance(record[key], str):
                raise DataError(f"{where}: {key!r} is a {type(record[key]).__name__}, not text.")
        return [("user", record[prompt_key]), ("assistant", record[response_key])]

    def _encode(self, records: list[dict[str, Any]]) -> tuple[list[tuple[np.ndarray, ...]], int]:
        """``(ids, labels)`` of each example that keeps a response token, and how many did not.

        Both have the example's length n (at most ``max_seq_length + 1``): ``labels[t]`` is
        ``ids[t + 1]`` where that is a response token, else -100; the last label is -100."""
        conversations = [_segments(self.template, self.messages(r)) for r in records]
        # each distinct text once: the template's headers recur in every example
        unique = list(dict.fromkeys(t for texts, _ in conversations for t in texts))
        encoded = dict(zip(unique, self.tokenizer.encode_batch(unique) if unique else []))
        examples, dropped, limit = [], 0, self.max_seq_length + 1
        for texts, trained in conversations:
            ids, mask = _join([encoded[t] for t in texts], trained, self.tokenizer.eod_id)
            ids_arr = np.asarray(ids[:limit], dtype=np.int64)
            labels = np.full(len(ids_arr), _IGNORE, dtype=np.int64)
            keep = np.asarray(mask[1:limit], dtype=bool)
            labels[:-1][keep] = ids_arr[1:][keep]
            if not keep.any():
                dropped += 1
                continue
            examples.append((ids_arr, labels))
        return examples, dropped

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.name!r}, rows={len(self.rows)}, "
                f"max_seq_length={self.max_seq_length}, packing={self.packing})")


def _pack(examples: list[tuple[np.ndarray, np.ndarray]], length: int, seed: int
          ) -> list[dict[str, np.ndarray]]:
    """The examples, in an order drawn from ``seed``, concatenated and cut into rows of
    ``length``; the last row padded (attention_mask 0, labels -100)."""
    order = np.random.default_rng(seed).permutation(len(examples))
    ids = np.concatenate([examples[i][0] for i in order])  # (N,)
    labels = np.concatenate([examples[i][1] for i in order])  # (N,)
    rows = -(-len(ids) // length)
    pad = rows * length - len(ids)
    mask = np.ones(rows * length, dtype=np.int64)
    mask[len(ids):] = 0
    ids = np.concatenate([ids, np.zeros(pad, dtype=np.int64)]).reshape(rows, length)
    labels = np.concatenate([labels, np.full(pad, _IGNORE, dtype=np.int64)]).reshape(rows, length)
    mask = mask.reshape(rows, length)
    return [{"input_ids": ids[r], "labels": labels[r], "attention_mask": mask[r]}
            for r in range(rows)]


def _conversation(value: Any, where: str, key: str) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: {key!r} must be a non-empty list of "
                        f"{{'role': ..., 'content': ...}} turns, got {value!r:.80}.")
    turns = []
    for n, turn in enumerate(value):
        role = turn.get("role") if isinstance(turn, Mapping) else None
        content = turn.get("content") if isinstance(turn, Mapping) else None
        if role not in ROLES or not isinstance(content, str):
            raise DataError(f"{where}: turn {n} of {key!r} must be {{'role': 'system' | 'user' | "
                            f"'assistant', 'content': text}}, got {turn!r:.80}."
                            + (did_you_mean(str(role), ROLES) if isinstance(role, str) else ""))
        turns.append((role, content))
    if not any(role == "assistant" for role, _ in turns):
        raise DataError(f"{where}: {key!r} has no 'assistant' turn, so nothing to train on.")
    return turns


def _tokenizer(spec: Any, name: str) -> TextTokenizer:
    if isinstance(spec, Mapping):
        spec = dict(spec)
        if spec.get("type", "bpe") not in TOKENIZER_KINDS:
            raise ConfigError(f"{name}: tokenizer.type={spec['type']!r} is not one of "
                              f"{', '.join(map(repr, TOKENIZER_KINDS))}.")
    try:
        return resolve_tokenizer(spec)
    except (ConfigError, DataError) as e:  # say which argument the message is about
        raise type(e)(f"{name}: tokenizer={spec!r}: {e}") from e


def _load(data_files: Any, split: str) -> list[dict[str, Any]]:
    if isinstance(data_files, str) and data_files in BUILTIN_INSTRUCTION_SETS:
        if split not in _SPLITS:
            raise ConfigError(unknown(f"InstructionDataset: split={split!r} of {data_files} is "
                                      f"unknown", split, _SPLITS, "Choose"))
        return shakespeare_instructions(split)
    path = split_file("InstructionDataset", data_files, split, BUILTIN_INSTRUCTION_SETS)
    return read_records(path, "jsonl")


def _source_name(data_files: Any, split: str) -> str:
    path = data_files[split] if isinstance(data_files, Mapping) else data_files
    return f"{os.path.basename(str(path))} ({split})"


@COLLATE_FUNCTIONS.register_module()
def instruction_collate(batch: Sequence[Mapping[str, Any]], pad_id: int = 0,
                        pad_to_multiple_of: int | None = None) -> dict[str, torch.Tensor]:
    """Pad :class:`InstructionDataset` rows to the longest of the batch (right padding).

    ``input_ids`` pad with ``pad_id`` (any id: nothing attends to it in a causal model and its
    label is -100), ``labels`` with -100; ``attention_mask`` is 1 on tokens, 0 on padding (a
    packed row brings its own). Packed rows are all ``max_seq_length`` long: they only stack.

    Args:
        batch: The rows.
        pad_id: The id written on padding. Defaults to 0 (GPT-2's ``<|endoftext|>``).
        pad_to_multiple_of: Round the length up to a multiple of it. Defaults to None.

    Returns:
        ``input_ids``, ``labels`` and ``attention_mask``, each (B, S) long.
    """
    length = max(len(item["input_ids"]) for item in batch)
    if pad_to_multiple_of:
        length = -(-length // pad_to_multiple_of) * pad_to_multiple_of
    n = len(batch)
    ids = torch.full((n, length), pad_id, dtype=torch.long)  # (B, S)
    labels = torch.full((n, length), _IGNORE, dtype=torch.long)  # (B, S)
    mask = torch.zeros((n, length), dtype=torch.long)  # (B, S)
    for i, item in enumerate(batch):
        k = len(item["input_ids"])
        ids[i, :k] = torch.as_tensor(item["input_ids"], dtype=torch.long)
        labels[i, :k] = torch.as_tensor(item["labels"], dtype=torch.long)
        mask[i, :k] = torch.as_tensor(item["attention_mask"], dtype=torch.long) \
            if "attention_mask" in item else 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}
