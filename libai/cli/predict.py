"""Predict labels of new text with a fine-tuned checkpoint.

    libai predict CONFIG CHECKPOINT "a passage" ["another" ...] [--pair TEXT ...]
        [--file new.csv] [--out predictions.jsonl] [--top-k 3] [--cfg-options ...] [--debug]

The model is CONFIG's, with the CHECKPOINT's weights; the text is encoded as CONFIG's
``LabeledTextDataset`` encodes it (its tokenizer, task, columns and ``max_seq_length``), and the
label names are the ones the checkpoint was trained with (``meta.dataset_meta``). Each input
prints one line: the label and its probability (classification), the labels above 0.5
(multi-label), the value (regression) or ``word/TAG`` pairs (token classification).
``--file`` reads a CSV, TSV or JSON-lines file with the dataset's text column(s); ``--out``
writes one JSON object per input.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch

from libai.checkpoint import checkpoint_weights, load_checkpoint, load_model_state
from libai.cli.configs import add_config_arguments, load_config
from libai.data.text import resolve_tokenizer
from libai.data.text.framing import frame_ids, pad_collate
from libai.data.text.records import read_records
from libai.registry import MODELS
from libai.runner.data_check import model_with_classes
from libai.utils.errors import ConfigError
from libai.utils.paths import check_output_path


def parse_args(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description="Predict labels of new text.")
    parser.add_argument("config", help="the fine-tuning config (or a shipped config's name)")
    parser.add_argument("checkpoint", help="a checkpoint of that config")
    parser.add_argument("texts", nargs="*", help="texts to label")
    parser.add_argument("--pair", nargs="*", default=None, help="second texts of pairs, one per text")
    parser.add_argument("--file", help="CSV, TSV or JSON lines with the dataset's text column(s)")
    parser.add_argument("--out", help="write the predictions as JSON lines")
    parser.add_argument("--top-k", type=int, default=1, help="labels to show per text")
    add_config_arguments(parser)
    return parser.parse_args(argv)


def _dataset_cfg(cfg) -> dict:
    for key in ("test_dataloader", "val_dataloader", "train_dataloader"):
        dataset = (cfg.get(key) or {}).get("dataset")
        if dataset is not None and dataset.get("type") == "LabeledTextDataset":
            return dataset.to_dict() if hasattr(dataset, "to_dict") else dict(dataset)
    raise ConfigError("The config reads no LabeledTextDataset: predict labels with a "
                      "fine-tuning config (e.g. bert_tiny_genre).")


def _inputs(args, dataset: dict) -> list[tuple[str, str | None]]:
    texts = list(args.texts)
    pairs = list(args.pair) if args.pair is not None else [None] * len(texts)
    if len(pairs) != len(texts):
        raise ConfigError(f"--pair gives {len(pairs)} texts for {len(texts)} inputs: one each.")
    if args.file:
        text_key = dataset.get("text_key", "text")
        pair_key = dataset.get("text_pair_key", "text_pair")
        for r in read_records(args.file):
            if text_key not in r:
                raise ConfigError(f"{r['_where']} has no {text_key!r} column (the config's "
                                  f"text_key).")
            texts.append(r[text_key])
            pairs.append(r.get(pair_key) if pair_key else None)
    if not texts:
        raise ConfigError("Nothing to predict: give texts as arguments or --file.")
    return list(zip(texts, pairs))


def _describe(task: str, logits: torch.Tensor, classes: list[str], k: int,
              words: Any = None) -> tuple[str, dict]:
    """One line and one JSON record for one input's logits."""
    if task == "regression":
        value = float(logits.reshape(-1)[0])
        return f"{value:.4g}", {"value": value}
    if task == "multi_label":
        probs = torch.sigmoid(logits.float())
        chosen = [(classes[i], float(probs[i])) for i in range(len(classes)) if probs[i] > 0.5]
        return (", ".join(f"{c} {p:.2f}" for c, p in chosen) or "(none)"), {"labels": chosen}
    if task == "token_classification":
        tags = [classes[i] for i in logits.argmax(-1).tolist()]
        return " ".join(f"{w}/{t}" for w, t in zip(words, tags)), {"tags": tags}
    probs = torch.softmax(logits.float(), -1)
    top = probs.topk(min(k, len(classes)))
    chosen = [(classes[i], float(p)) for p, i in zip(top.values.tolist(), top.indices.tolist())]
    return "  ".join(f"{c} {p:.2f}" for c, p in chosen), {"label": chosen[0][0], "top": chosen}


def _check_args(args) -> None:
    """What the arguments alone can tell, before the model and the checkpoint load."""
    if args.top_k < 1:
        raise ConfigError(f"--top-k must be at least 1, got {args.top_k}.")
    if args.file is not None and not os.path.isfile(args.file):
        raise ConfigError(f"--file {args.file}: no such file (relative paths start from "
                          f"{os.getcwd()}).")
    if args.out is not None:
        check_output_path(args.out, "--out")


def main(argv=None, prog=None):
    args = parse_args(argv, prog)
    _check_args(args)
    cfg = load_config(args.config, args.cfg_options)
    dataset = _dataset_cfg(cfg)
    task, length = dataset.get("task", "classification"), dataset.get("max_seq_length", 128)
    ckpt = load_checkpoint(args.checkpoint)
    classes = ((ckpt.get("meta") or {}).get("dataset_meta") or {}).get("classes")
    if task != "regression" and not classes:
        classes = list(dataset.get("classes") or [])
        if not classes:
            raise ConfigError(f"{args.checkpoint} holds no label names (meta.dataset_meta) and "
                              f"the config lists none: set the dataset's classes=[...].")
    # num_classes=None: the checkpoint's labels (libai.runner.data_check)
    model_cfg = model_with_classes(cfg.model.to_dict(), {
        "classes": classes, "task": task, "section": f"the checkpoint {args.checkpoint}"})
    model = MODELS.build(model_cfg, path="model")
    load_model_state(model, checkpoint_weights(args.checkpoint, ckpt))  # a sharded one too
    model.eval()
    tokenizer = resolve_tokenizer(dataset["tokenizer"])
    rows = []
    for text, pair in _inputs(args, dataset):
        words = text.split() if task == "token_classification" else None
        if words is not None:
            enc = tokenizer.backend.encode(words, is_pretokenized=True, add_special_tokens=False)
            item = frame_ids(tokenizer, enc.ids, None, length)
            first = [i + 1 for i, w in enumerate(enc.word_ids[: len(item["input_ids"]) - 2])
                     if i == 0 or enc.word_ids[i - 1] != w]  # the first piece of each word
        else:
            item = frame_ids(tokenizer, tokenizer.encode(text),
                             tokenizer.encode(pair) if pair else None, length)
        with torch.no_grad():
            logits = model(pad_collate([item]))["logits"][0]
        if words is not None:
            logits, words = logits[first], words[: len(first)]
        line, record = _describe(task, logits, classes, args.top_k, words)
        shown = " ".join(text.split())  # one line per input: a field's line breaks (--out keeps them)
        print(f"{line}\t{shown if len(shown) <= 70 else shown[:67] + '...'}")
        rows.append({"text": text, **({"text_pair": pair} if pair else {}), **record})
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        print(f"wrote {len(rows)} predictions to {args.out}")
