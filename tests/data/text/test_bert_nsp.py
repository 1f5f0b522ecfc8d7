"""Next-sentence prediction end to end: the dataset's pairs, BertForPreTraining's pooler and NSP
head, and the shipped configs' NSP metric agree on one key and one convention.

``configs/bert_tiny.py`` keeps its NSP accuracy at chance for its 1,500 iterations and leaves
chance only after about 2,500 (docs/models.md, "Next sentence prediction on Shakespeare"); these
tests pin that the pipeline can learn it, so that a chance-level figure points at the
optimisation, not at the wiring.
"""

from __future__ import annotations

import os

import pytest
import torch
from text_fixtures import shakespeare_documents, train_tokenizer, write_corpus
from torch.utils.data import default_collate

from libai.config import Config
from libai.data import SampleKey
from libai.data.text import BertPretrainingDataset
from libai.evaluator import build_evaluator
from libai.model import BertForPreTraining

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SEQ, N = 64, 32


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """The dataset and a batch of N of its pairs (both labels present)."""
    docs = shakespeare_documents(num_plays=4, max_lines=400)
    corpus = write_corpus(
        tmp_path_factory.mktemp("nsp") / "wp", docs, train_tokenizer(docs, "wordpiece", 1000)
    )
    ds = BertPretrainingDataset(corpus, max_seq_length=SEQ)
    batch = default_collate([ds[SampleKey(i * 7 % len(ds), i, 0)] for i in range(N)])
    assert 0 < batch["next_sentence_label"].sum() < N
    return ds, batch


def tiny_bert(ds, **kw):
    torch.manual_seed(0)
    return BertForPreTraining(
        vocab_size=ds.vocab_size,
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        ffn_hidden_size=64,
        max_position_embeddings=SEQ,
        **kw,
    )


def test_nsp_loss_reaches_the_encoder_and_fits_fixed_pairs(pairs):
    ds, batch = pairs
    model = tiny_bert(ds, hidden_dropout=0.0, attention_dropout=0.0)
    model(batch)["nsp_loss"].backward()  # the NSP loss alone: pooler, then every block
    for name in (
        "bert.pooler.dense.weight",
        "bert.blocks.0.attn.q_proj.weight",
        "bert.embeddings.word_embeddings.weight",
        "sentence_head.weight",
    ):
        grad = model.get_parameter(name).grad
        assert grad is not None and grad.abs().sum() > 0, name
    # trained as the engine trains it, on the sum of both losses, until it has every label right
    # (30 to 60 steps for init seeds 0-2; at this rate it may then wobble, so the test stops there)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    hits = []
    for step in range(1, 121):
        loss = sum(v for k, v in model(batch).items() if k.endswith("loss"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 10 == 0:
            with torch.no_grad():
                logits = model.eval()(batch)["nsp_logits"]  # (N, 2)
            hits.append(int((logits.argmax(1) == batch["next_sentence_label"]).sum()))
            if hits[-1] == N:
                break
            model.train()
    assert hits[-1] == N, hits


def test_shipped_nsp_metric_reads_the_nsp_logits_and_labels(pairs):
    ds, batch = pairs
    cfg = Config.fromfile(os.path.join(ROOT, "configs", "bert_tiny.py"))
    model = tiny_bert(ds).eval()
    with torch.no_grad():
        out = model(batch)
    label = batch["next_sentence_label"]
    want = (out["nsp_logits"].argmax(1) == label).float().mean().item()
    right = torch.nn.functional.one_hot(label, 2).float()  # scores for the true class
    for logits, expected in ((out["nsp_logits"], want), (right, 1.0), (1 - right, 0.0)):
        evaluator = build_evaluator(cfg.val_evaluator, path="val_evaluator")
        evaluator.process(batch, dict(out, nsp_logits=logits))
        assert evaluator.evaluate(N)["nsp/accuracy"] == pytest.approx(expected)
