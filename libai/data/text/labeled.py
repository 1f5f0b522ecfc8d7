"""Labeled text for fine-tuning: :class:`LabeledTextDataset` and the padding collator.

::

    dataset = dict(
        type="LabeledTextDataset",
        data_files=dict(train="data/train.csv", val="data/val.csv", test="data/test.csv"),
        split="train",
        tokenizer="work_dirs/my_bert_hf",        # or dict(corpus="shakespeare", ...)
        task="classification",                   # regression | multi_label | token_classification
        text_key="text", text_pair_key="text_pair", label_key="label",
        max_seq_length=128,
    )

The label map (``metainfo["classes"]``) is read from the **train** file of ``data_files`` (or
given as ``classes=[...]``), so every split numbers the labels alike; a label of the val or test
file that training never saw is an error naming it. Class names are sorted: numerically when
every label is an integer, else as text; ``"O"`` first for token tags. The runner stores the
classes in every checkpoint (``meta["dataset_meta"]``) and ``libai convert libai2hf`` writes them
as ``id2label``.

An item is ``{"input_ids", "token_type_ids", "labels"}`` (numpy, unpadded); ``pad_collate``
(libai.data.text.framing) pads a batch to its longest item and adds ``attention_mask``. Encoding
as BERT does: ``[CLS] text [SEP] (text_pair [SEP])``, the pair's segment 1, truncated
longest-first to ``max_seq_length``. A byte-level BPE tokenizer (GPT-2) gives
``text <eot> (text_pair <eot>)``.
Token classification takes words and one tag per word (a JSON list, or space-separated text in a
CSV); the first piece of each word gets its tag, the other pieces and the specials -100.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from libai.registry import DATASETS
from libai.utils.errors import ConfigError, DataError
from libai.utils.logging import print_log
from libai.utils.suggest import did_you_mean, unknown

from .framing import IGNORE_INDEX as _IGNORE
from .framing import frame_ids, pad_collate  # re-exported: the collator of these items
from .records import BUILTIN_LABELED, genre_records, read_records, split_file
from .tokenizer import TextTokenizer
from .tokenizer_spec import resolve_tokenizer

__all__ = ["TASKS", "LabeledTextDataset", "frame_ids", "label_map", "pad_collate"]

TASKS = ("classification", "regression", "multi_label", "token_classification")


@DATASETS.register_module()
class LabeledTextDataset(Dataset):
    """Labeled text from CSV, TSV or JSON-lines files (or the built-in genre set), tokenized.

    Args:
        data_files: ``dict(train=..., val=..., test=...)`` paths; one path (its records are the
            split); or ``"shakespeare_genre"`` (libai.data.text.records).
        tokenizer: The model's tokenizer (see libai.data.text.tokenizer_spec): a path, a
            Hugging Face folder, or ``dict(corpus=..., type=..., vocab_size=...)``.
        split: Which entry of ``data_files`` to read. Defaults to "train".
        task: One of :data:`TASKS`. Defaults to "classification".
        text_key: The text column (the words, for token classification). Defaults to "text".
        text_pair_key: The second text of a pair; used when the records have it, None never.
            Defaults to "text_pair".
        label_key: The label column (tags, for token classification). Defaults to "label".
        classes: The label names in id order. Defaults to None: read from the train file.
        max_seq_length: Longest encoding, specials included. Defaults to 128.
        fmt: "auto", "csv", "tsv" or "jsonl". Defaults to "auto".
        label_sep: Separates the labels of one record in a CSV for ``multi_label``.
            Defaults to ",".

    Raises:
        ConfigError: A bad argument (unknown task, missing split).
        DataError: A missing column, an empty file, a label column of mixed kinds, a label the
            train file lacks; each naming the file and line.
    """

    def __init__(self, data_files: str | os.PathLike | Mapping[str, Any], tokenizer: Any,
                 split: str = "train", task: str = "classification", text_key: str = "text",
                 text_pair_key: str | None = "text_pair", label_key: str = "label",
                 classes: Sequence[str] | None = None, max_seq_length: int = 128,
                 fmt: str = "auto", label_sep: str = ",") -> None:
        if isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int) \
                or max_seq_length < 4:
            raise ConfigError(f"LabeledTextDataset: max_seq_length must be an int >= 4, got "
                              f"{max_seq_length!r}.")
        self.max_seq_length = max_seq_length
        self.tokenizer: TextTokenizer = resolve_tokenizer(tokenizer)
        self.name = data_files if isinstance(data_files, str) else "LabeledTextDataset"
        records = self._read(data_files, split, task, text_key, text_pair_key, label_key,
                             classes, fmt, label_sep)
        self.items = self._encode(records)
        self.lengths = np.array([len(item["input_ids"]) for item in self.items], dtype=np.int64)
        self.metainfo = {"classes": self.classes, "task": task,
                         "vocab_size": self.tokenizer.vocab_size, "max_seq_length": max_seq_length,
                         "tokenizer": self.tokenizer.source,
                         "collate_fn": "pad_collate"}  # items differ in length
        print_log(f"{self.name} {split}: {len(self.items):,} samples, "
                  f"{int(self.lengths.mean())} tokens on average; {self._counts_text()}")

    def _read(self, data_files: Any, split: str, task: str, text_key: str,
              text_pair_key: str | None, label_key: str, classes: Sequence[str] | None,
              fmt: str, label_sep: str) -> list[dict[str, Any]]:
        """The records of ``split``, their columns checked; sets the keys and the label map."""
        if task not in TASKS:
            raise ConfigError(unknown(f"LabeledTextDataset: task={task!r} is unknown", task,
                                      TASKS, "Choose from"))
        self.task, self.split = task, split
        self.text_key, self.label_key, self.label_sep = text_key, label_key, label_sep
        records = _load(data_files, split, fmt)
        self.text_pair_key = text_pair_key if text_pair_key in records[0] else None
        _check_columns(records, [text_key, label_key] + [self.text_pair_key] * bool(self.text_pair_key))
        if task == "regression":
            self.classes: tuple[str, ...] | None = None
        elif classes is not None:
            self.classes = tuple(str(c) for c in classes)
        else:
            train = records if split == "train" or not isinstance(data_files, Mapping) \
                else _load(data_files, "train", fmt)
            self.classes = label_map(self._raw_labels(train), task)
        return records

    @classmethod
    def check_files(cls, data_files: Any, split: str = "train", task: str = "classification",
                    text_key: str = "text", text_pair_key: str | None = "text_pair",
                    label_key: str = "label", classes: Sequence[str] | None = None,
                    fmt: str = "auto", label_sep: str = ",", **_: Any) -> dict[str, Any]:
        """Read ``split``'s file and check it as building the dataset would (columns, labels,
        one tag per word), without the tokenizer: the runner calls it for every split before
        it builds the model. Takes the dataset's arguments (the others are ignored).

        Returns:
            ``{"classes": the label map (None for regression), "task": task}``.

        Raises:
            ConfigError, DataError: as building the dataset would.
        """
        self = cls.__new__(cls)
        for record in self._read(data_files, split, task, text_key, text_pair_key, label_key,
                                 classes, fmt, label_sep):
            if task == "token_classification":
                self._word_tags(record)
            else:
                self._target(record)
        return {"classes": self.classes, "task": task}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.items[index]

    def get_cat_ids(self, index: int) -> list[int]:
        """The class ids of sample ``index`` (mmengine's name): its label, its labels
        (multi-label), its distinct tags (tokens); none for regression. A limited evaluation
        samples by them (libai.loops.eval_sample)."""
        labels = self.items[index]["labels"]
        if self.task == "regression":
            return []
        if self.task == "multi_label":
            return np.flatnonzero(labels).tolist()
        ids = np.atleast_1d(labels)
        return sorted(set(ids[ids != _IGNORE].tolist()))

    # ---------------------------------------------------------------------------- labels
    def _raw_labels(self, records: list[dict[str, Any]]) -> list[tuple[Any, str]]:
        """``(label value, where)`` of every label the records hold (every tag, per word)."""
        out = []
        for r in records:
            value = r[self.label_key]
            if self.task == "multi_label":
                out += [(v, r["_where"]) for v in _as_list(value, self.label_sep)]
            elif self.task == "token_classification":
                out += [(v, r["_where"]) for v in _as_list(value, None)]
            else:
                out.append((value, r["_where"]))
        return out

    def _label_id(self, value: Any, where: str) -> int:
        assert self.classes is not None
        name = str(value)
        try:
            return self.classes.index(name)
        except ValueError:
            raise DataError(
                f"{where}: label {name!r} is not one of the training labels "
                f"({', '.join(self.classes)}).{did_you_mean(name, self.classes)} Fix the label, "
                f"or list every label with classes=[...].") from None

    def _target(self, record: dict[str, Any]) -> Any:
        value, where = record[self.label_key], record["_where"]
        if self.task == "regression":
            try:
                return np.float32(float(value))
            except (TypeError, ValueError):
                raise DataError(f"{where}: label {value!r} is not a number (task='regression')."
                                ) from None
        if self.task == "multi_label":
            hot = np.zeros(len(self.classes), dtype=np.float32)
            for v in _as_list(value, self.label_sep):
                hot[self._label_id(v, where)] = 1.0
            return hot
        return self._label_id(value, where)

    def _counts_text(self) -> str:
        if self.task == "regression":
            y = np.array([item["labels"] for item in self.items], dtype=np.float64)
            return f"labels: mean {y.mean():.3g}, std {y.std():.3g}, range [{y.min():.3g}, {y.max():.3g}]"
        counts: Counter = Counter()
        for item in self.items:
            labels = np.atleast_1d(item["labels"])
            if self.task == "multi_label":
                counts.update(np.flatnonzero(labels).tolist())
            else:
                counts.update(labels[labels != _IGNORE].tolist())
        total = sum(counts.values()) or 1
        return "labels: " + ", ".join(f"{name} {counts[i]:,} ({100 * counts[i] / total:.0f}%)"
                                      for i, name in enumerate(self.classes))

    # -------------------------------------------------------------------------- encoding
    def _encode(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.task == "token_classification":
            return [self._encode_words(r) for r in records]
        texts = [_text(r, self.text_key) for r in records]
        pairs = [_text(r, self.text_pair_key) for r in records] if self.text_pair_key else None
        ids_a = self.tokenizer.encode_batch(texts)
        ids_b = self.tokenizer.encode_batch(pairs) if pairs else [None] * len(records)
        return [{**self.frame(a, b), "labels": self._target(r)}
                for a, b, r in zip(ids_a, ids_b, records)]

    def encode_text(self, text: str, text_pair: str | None = None) -> dict[str, np.ndarray]:
        """One unlabeled input as the model reads it (for predicting on new text)."""
        a = self.tokenizer.encode(text)
        return self.frame(a, self.tokenizer.encode(text_pair) if text_pair is not None else None)

    def frame(self, a: list[int], b: list[int] | None = None) -> dict[str, np.ndarray]:
        """Token ids framed with the specials and truncated (:func:`frame_ids`)."""
        return frame_ids(self.tokenizer, a, b, self.max_seq_length)

    def _word_tags(self, record: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        """The words of a token-classification record and their tags, one per word, each a
        training label."""
        words = _as_list(record[self.text_key], None)
        tags = _as_list(record[self.label_key], None)
        where = record["_where"]
        if len(words) != len(tags):
            raise DataError(f"{where}: {len(words)} words but {len(tags)} tags in "
                            f"'{self.label_key}': give one tag per word.")
        for tag in tags:
            self._label_id(tag, where)
        return words, tags

    def _encode_words(self, record: dict[str, Any]) -> dict[str, Any]:
        words, tags = self._word_tags(record)
        where = record["_where"]
        enc = self.tokenizer.backend.encode([str(w) for w in words], is_pretokenized=True,
                                            add_special_tokens=False)
        ids, labels, previous = [], [], None
        for piece, word in zip(enc.ids, enc.word_ids):
            ids.append(piece)
            labels.append(self._label_id(tags[word], where) if word != previous else _IGNORE)
            previous = word
        item = self.frame(ids)  # truncates
        wordpiece = self.tokenizer.kind == "wordpiece"
        kept = labels[: len(item["input_ids"]) - (2 if wordpiece else 1)]
        framed = [_IGNORE, *kept, _IGNORE] if wordpiece else [*kept, _IGNORE]  # like the ids
        item["labels"] = np.array(framed, dtype=np.int64)
        return item


# -------------------------------------------------------------------------------- helpers
def _load(data_files: Any, split: str, fmt: str) -> list[dict[str, Any]]:
    if isinstance(data_files, str) and data_files in BUILTIN_LABELED:
        return genre_records(split)
    return read_records(split_file("LabeledTextDataset", data_files, split, BUILTIN_LABELED), fmt)


def _check_columns(records: list[dict[str, Any]], keys: list[str]) -> None:
    for r in records:
        missing = [k for k in keys if k not in r or r[k] is None]
        if missing:
            have = [k for k in r if k != "_where"]
            raise DataError(
                f"{r['_where']} has no {missing[0]!r} column.{did_you_mean(missing[0], have)} "
                f"Its columns: {', '.join(have)}; name yours with text_key=..., label_key=... "
                f"(text_pair_key=None for single texts).")


def _text(record: dict[str, Any], key: str) -> str:
    value = record[key]
    if not isinstance(value, str):
        raise DataError(f"{record['_where']}: {key!r} is a {type(value).__name__}, not text.")
    return value


def _as_list(value: Any, sep: str | None) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        return [v.strip() for v in value.split(sep) if v.strip()]
    return [value]


def label_map(labels: list[tuple[Any, str]], task: str) -> tuple[str, ...]:
    """The sorted class names of ``(label, where)`` pairs (see the module docstring).

    Raises:
        DataError: No labels, or labels of mixed kinds (numbers and text; an empty label).
    """
    if not labels:
        raise DataError("The train file holds no labels.")
    kinds = {}
    for value, where in labels:
        kinds.setdefault(_kind(value), (value, where))
    if len(kinds) > 1 or "empty" in kinds:
        shown = "; ".join(f"{k} {v!r} at {w}" for k, (v, w) in kinds.items())
        raise DataError(f"The label column mixes kinds of values ({shown}): make every label "
                        f"a class name, or every label an integer id.")
    names = {str(v) for v, _ in labels}
    if "int" in kinds:
        ordered = sorted(names, key=lambda s: int(float(s)))
    else:
        ordered = sorted(names)
    if task == "token_classification" and "O" in names:
        ordered = ["O"] + [n for n in ordered if n != "O"]
    return tuple(ordered)


def _kind(value: Any) -> str:
    if isinstance(value, bool) or value is None or value == "":
        return "empty" if value in (None, "") else "bool"
    if isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit()):
        return "int"
    if isinstance(value, float):
        return "float"
    return "text" if isinstance(value, str) else type(value).__name__
