"""LabeledTextDataset: files in, the batch the fine-tuning heads read out; every bad input is one
clear error naming the file and line."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
from text_fixtures import shakespeare_documents, train_tokenizer

from libai.data import LengthGroupedSampler, build_dataloader
from libai.data.text import LabeledTextDataset, genre_records, pad_collate
from libai.data.text.records import GENRE_SPLITS
from libai.utils.errors import ConfigError, DataError


@pytest.fixture(scope="module")
def tok_path(tmp_path_factory):
    tok = train_tokenizer(shakespeare_documents(2), "wordpiece", 600)
    return str(tok.save(tmp_path_factory.mktemp("tok") / "tokenizer.json"))


def write(path, rows, fmt=None):
    fmt = fmt or path.suffix[1:]
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        sep = "," if fmt == "csv" else "\t"
        keys = list(rows[0])
        lines = [sep.join(keys)] + [sep.join(str(r[k]) for k in keys) for r in rows]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def files(tmp_path, train, val, suffix=".csv"):
    return dict(train=write(tmp_path / f"train{suffix}", train),
                val=write(tmp_path / f"val{suffix}", val))


ROWS = [{"text": "to be or not to be", "label": "tragedy"},
        {"text": "what light through yonder window breaks", "label": "tragedy"},
        {"text": "if music be the food of love play on", "label": "comedy"}]


def test_csv_classification_frames_as_bert_and_numbers_labels_by_the_train_file(tmp_path, tok_path):
    data = files(tmp_path, ROWS, [{"text": "play on", "label": "comedy"}])
    train = LabeledTextDataset(data, tok_path)
    val = LabeledTextDataset(data, tok_path, split="val")
    assert train.metainfo["classes"] == val.metainfo["classes"] == ("comedy", "tragedy")
    item = train[0]
    tok = train.tokenizer
    assert item["input_ids"].tolist() == [tok.cls_id, *tok.encode(ROWS[0]["text"]), tok.sep_id]
    assert item["labels"] == 1 and val[0]["labels"] == 0
    assert not item["token_type_ids"].any()


def test_pairs_get_segment_one_and_truncate_longest_first(tmp_path, tok_path):
    rows = [{"text": "a " * 40, "text_pair": "b c", "label": 0}]
    data = write(tmp_path / "pairs.jsonl", rows)
    item = LabeledTextDataset(data, tok_path, max_seq_length=16)[0]
    tok = LabeledTextDataset(data, tok_path, max_seq_length=16).tokenizer
    ids, types = item["input_ids"].tolist(), item["token_type_ids"].tolist()
    assert len(ids) == 16 and ids[0] == tok.cls_id and ids.count(tok.sep_id) == 2
    b = tok.encode("b c")
    assert ids[-len(b) - 1:-1] == b  # the short pair kept whole, the long text cut
    assert types == [0] * (16 - len(b) - 1) + [1] * (len(b) + 1)


def test_integer_labels_sort_as_numbers(tmp_path, tok_path):
    rows = [{"text": "x", "label": n} for n in (10, 2, 1)]
    ds = LabeledTextDataset(write(tmp_path / "t.csv", rows), tok_path)
    assert ds.metainfo["classes"] == ("1", "2", "10")
    assert [ds[i]["labels"] for i in range(3)] == [2, 1, 0]


def test_regression_and_multi_label_targets(tmp_path, tok_path):
    rows = [{"text": "x", "label": 0.5}, {"text": "y", "label": 3}]
    reg = LabeledTextDataset(write(tmp_path / "r.jsonl", rows), tok_path, task="regression")
    assert reg.metainfo["classes"] is None and reg[0]["labels"] == np.float32(0.5)
    batch = pad_collate([reg[0], reg[1]])
    assert batch["labels"].dtype == torch.float32 and batch["labels"].shape == (2,)
    rows = [{"text": "x", "label": ["love", "war"]}, {"text": "y", "label": ["war"]}]
    multi = LabeledTextDataset(write(tmp_path / "m.jsonl", rows), tok_path, task="multi_label")
    batch = pad_collate([multi[0], multi[1]])
    assert multi.metainfo["classes"] == ("love", "war")
    assert batch["labels"].tolist() == [[1.0, 1.0], [0.0, 1.0]]


def test_token_labels_go_on_the_first_piece_of_each_word(tmp_path, tok_path):
    rows = [{"tokens": ["Romeo", "loveth", "Juliet"], "tags": ["B-PER", "O", "B-PER"]}]
    ds = LabeledTextDataset(write(tmp_path / "ner.jsonl", rows), tok_path,
                            task="token_classification", text_key="tokens", label_key="tags")
    assert ds.metainfo["classes"] == ("O", "B-PER")  # "O" first
    tok, item = ds.tokenizer, ds[0]
    pieces = [tok.encode(w.lower()) for w in rows[0]["tokens"]]
    want = [-100]
    for word, p in zip([1, 0, 1], pieces):
        want += [word] + [-100] * (len(p) - 1)
    assert item["labels"].tolist() == want + [-100]
    assert len(item["labels"]) == len(item["input_ids"])
    batch = pad_collate([item, ds.items[0] | {"input_ids": item["input_ids"][:3],
                                              "token_type_ids": item["token_type_ids"][:3],
                                              "labels": item["labels"][:3]}])
    assert batch["labels"][1, 3:].eq(-100).all() and batch["attention_mask"][1].sum() == 3


def test_padding_collator_masks_and_pads_to_the_longest(tmp_path, tok_path):
    ds = LabeledTextDataset(write(tmp_path / "t.csv", ROWS), tok_path)
    batch = pad_collate([ds[0], ds[1]], pad_to_multiple_of=8)
    longest = max(len(ds[0]["input_ids"]), len(ds[1]["input_ids"]))
    assert batch["input_ids"].shape[1] == -(-longest // 8) * 8
    assert batch["attention_mask"].sum(1).tolist() == [len(ds[0]["input_ids"]), len(ds[1]["input_ids"])]
    assert batch["input_ids"][batch["attention_mask"] == 0].eq(0).all()


@pytest.mark.parametrize("case, message", [
    ("missing column", "has no 'label' column"),
    ("unknown label", "label 'comdy' is not one of the training labels (comedy, tragedy). Did you mean 'comedy'?"),
    ("empty file", "holds no records"),
    ("mixed kinds", "mixes kinds of values"),
    ("bad task", "task='clasification' is unknown. Did you mean 'classification'"),
    ("bad split", "split='tset' is not in data_files"),
    ("not a number", "is not a number (task='regression')"),
])
def test_bad_input_is_one_clear_error(tmp_path, tok_path, case, message):
    kwargs = {}
    if case == "missing column":
        data = write(tmp_path / "t.csv", [{"text": "x", "labels": "a"}])
    elif case == "unknown label":
        data = files(tmp_path, ROWS, [{"text": "x", "label": "comdy"}])
        kwargs["split"] = "val"
    elif case == "empty file":
        (tmp_path / "t.jsonl").write_text("\n")
        data = str(tmp_path / "t.jsonl")
    elif case == "mixed kinds":
        data = write(tmp_path / "t.jsonl", [{"text": "x", "label": 1}, {"text": "y", "label": "two"}])
    elif case == "bad task":
        data, kwargs["task"] = write(tmp_path / "t.csv", ROWS), "clasification"
    elif case == "bad split":
        data, kwargs["split"] = files(tmp_path, ROWS, ROWS), "tset"
    else:
        data = write(tmp_path / "t.csv", ROWS)
        kwargs["task"] = "regression"
    with pytest.raises((DataError, ConfigError)) as e:
        LabeledTextDataset(data, tok_path, **kwargs)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_length_grouped_batches_are_nearly_uniform_and_deterministic(tmp_path, tok_path):
    rng = np.random.default_rng(0)
    rows = [{"text": " ".join(["love"] * int(n)), "label": "a"} for n in rng.integers(1, 60, 400)]
    ds = LabeledTextDataset(write(tmp_path / "t.jsonl", rows), tok_path)
    cfg = dict(dataset=ds, batch_size=8, collate_fn=dict(type="pad_collate"),
               sampler=dict(type="LengthGroupedSampler", shuffle=True, mega_batch_mult=10))
    loader = build_dataloader(cfg, seed=0)
    assert isinstance(loader.sampler, LengthGroupedSampler)
    order = list(loader.sampler)
    assert sorted(order) == list(range(400)) and order == list(build_dataloader(cfg, seed=0).sampler)
    real = int(ds.lengths.sum())
    grouped_pad = sum(b["attention_mask"].numel() for b in loader) - real
    plain = build_dataloader({**cfg, "sampler": dict(type="DefaultSampler", shuffle=True)}, seed=0)
    plain_pad = sum(b["attention_mask"].numel() for b in plain) - real
    assert grouped_pad < 0.3 * plain_pad


@pytest.mark.parametrize("collate_fn", [None, "default_collate"])
def test_a_loader_that_would_stack_items_of_different_lengths_names_the_padding_one(
        tmp_path, tok_path, collate_fn):
    rows = [{"text": "word " * n, "label": n % 2} for n in range(1, 9)]
    ds = LabeledTextDataset(write(tmp_path / "t.jsonl", rows), tok_path)
    with pytest.raises(ConfigError, match=r"'train_dataloader.collate_fn' = .*collate_fn='pad_collate'"):
        build_dataloader(dict(dataset=ds, batch_size=4, collate_fn=collate_fn), seed=0,
                         path="train_dataloader")


def test_genre_set_is_split_by_play_with_all_three_genres():
    splits = {s: genre_records(s) for s in ("train", "val", "test")}
    plays = {s: {r["play"] for r in recs} for s, recs in splits.items()}
    assert not (plays["train"] & plays["val"]) and not (plays["train"] & plays["test"])
    assert plays["val"] == set(GENRE_SPLITS["val"]) and plays["test"] == set(GENRE_SPLITS["test"])
    for recs in splits.values():
        counts = Counter(r["label"] for r in recs)
        assert set(counts) == {"comedy", "history", "tragedy"}
    assert len(splits["train"]) > 6000 and len(splits["test"]) > 1500
