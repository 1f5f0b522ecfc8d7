"""BERT: batch contract (train losses, eval outputs), heads, init, meta building, errors."""

import pytest
import torch
import torch.nn.functional as F

from libai.model import BertForPreTraining, BertForSequenceClassification, BertModel
from libai.registry import MODELS
from libai.utils.errors import ConfigError, DataError, LibaiError

TINY = dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, ffn_hidden_size=37,
            max_position_embeddings=64)
NO_DROPOUT = dict(hidden_dropout=0.0, attention_dropout=0.0)


def batch(B=3, S=12, P=4, seed=0, pad_row=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 99, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    if pad_row:
        mask[1, 8:] = 0
        ids[1, 8:] = 0
    types = torch.zeros(B, S, dtype=torch.long)
    types[:, S // 2:] = 1
    positions = torch.stack([torch.randperm(8, generator=g)[:P] for _ in range(B)])  # (B, P)
    labels = torch.randint(1, 99, (B, P), generator=g)
    labels[0, -1] = -100  # an unused prediction slot
    positions[0, -1] = 0
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types, mlm_positions=positions,
                mlm_labels=labels, next_sentence_label=torch.randint(0, 2, (B,), generator=g))


def dense_labels(b):
    """The same targets in Hugging Face's (B, S) form."""
    labels = torch.full_like(b["input_ids"], -100)
    valid = b["mlm_labels"] != -100
    for i in range(labels.shape[0]):
        labels[i, b["mlm_positions"][i][valid[i]]] = b["mlm_labels"][i][valid[i]]
    return labels


@pytest.mark.parametrize("second_head,keys", [("nsp", {"mlm_loss", "nsp_loss"}),
                                              ("sop", {"mlm_loss", "sop_loss"}),
                                              (None, {"mlm_loss"})])
def test_every_second_head_trains(second_head, keys):
    torch.manual_seed(0)
    model = BertForPreTraining(**TINY, second_head=second_head)
    b = batch()
    out = model(b)
    # num_items: the masked tokens the masked-LM loss is the mean over
    assert out.pop("num_items") == {"mlm_loss": (b["mlm_labels"] != -100).sum()}
    assert set(out) == keys and all(v.ndim == 0 for v in out.values())
    sum(out.values()).backward()
    assert model.bert.embeddings.word_embeddings.weight.grad is not None
    assert (model.bert.pooler is None) == (second_head is None)
    assert (model.sentence_head is None) == (second_head is None)


def test_positions_format_and_dense_labels_give_the_same_loss():
    torch.manual_seed(0)
    model = BertForPreTraining(**TINY, **NO_DROPOUT)
    b = batch()
    dense = {k: v for k, v in b.items() if k != "mlm_positions"} | {"mlm_labels": dense_labels(b)}
    a, d = model(b), model(dense)
    torch.testing.assert_close(a["mlm_loss"], d["mlm_loss"])
    mlm, nsp = model.logits(b["input_ids"], b["attention_mask"], b["token_type_ids"])
    expected = F.cross_entropy(mlm.flatten(0, 1), dense["mlm_labels"].flatten())
    torch.testing.assert_close(a["mlm_loss"], expected)
    torch.testing.assert_close(a["nsp_loss"], F.cross_entropy(nsp, b["next_sentence_label"]))


def test_eval_outputs_feed_the_metrics_and_match_train_loss():
    torch.manual_seed(0)
    model = BertForPreTraining(**TINY, **NO_DROPOUT)
    b = batch()
    train = model(b)
    model.eval()
    with torch.no_grad():
        out = model(b)
    assert set(out) == {"loss", "mlm_loss", "nsp_loss", "nll_sum", "num_tokens", "num_correct",
                        "nsp_logits", "num_items"}
    assert out["num_items"] == {"mlm_loss": 11}  # the evaluation loss weighs mlm_loss by it
    assert out["nll_sum"].shape == (3,) and out["nll_sum"].dtype == torch.float32
    assert out["num_tokens"].tolist() == [3, 4, 4] and out["num_tokens"].dtype == torch.long
    assert out["num_correct"].shape == (3,) and out["num_correct"].dtype == torch.long
    assert out["nsp_logits"].shape == (3, 2)
    mean_nll = out["nll_sum"].sum() / out["num_tokens"].sum()
    torch.testing.assert_close(mean_nll, train["mlm_loss"].detach())
    torch.testing.assert_close(out["loss"], (train["mlm_loss"] + train["nsp_loss"]).detach())
    mlm, _ = model.logits(b["input_ids"], b["attention_mask"], b["token_type_ids"])
    hits = (mlm.argmax(-1) == dense_labels(b)).sum(1)
    assert out["num_correct"].tolist() == hits.tolist()
    no_labels = model({k: b[k] for k in ("input_ids", "attention_mask")})
    assert no_labels["mlm_logits"].shape == (3, 12, 99) and no_labels["nsp_logits"].shape == (3, 2)


def test_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    model = BertForPreTraining(**TINY).eval()
    b = batch()
    other = b["input_ids"].clone()
    other[1, 8:] = 7  # different content under the padding
    with torch.no_grad():
        a, _ = model.logits(b["input_ids"], b["attention_mask"])
        c, _ = model.logits(other, b["attention_mask"])
    torch.testing.assert_close(a[1, :8], c[1, :8])
    torch.testing.assert_close(a[0], c[0])


def test_loss_falls_with_adamw_on_a_fixed_batch():
    torch.manual_seed(0)
    model = BertForPreTraining(**TINY)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    b, losses = batch(), []
    for _ in range(20):
        loss = sum(v for k, v in model(b).items() if "loss" in k)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0], losses


def test_pre_norm_has_a_final_norm_and_trains():
    torch.manual_seed(0)
    model = BertForPreTraining(**TINY, pre_norm=True)
    assert model.bert.final_norm is not None and model.bert.blocks[0].pre_norm
    assert BertForPreTraining(**TINY).bert.final_norm is None
    sum(v for k, v in model(batch()).items() if "loss" in k).backward()


def test_init_statistics_and_tied_head():
    torch.manual_seed(0)
    model = BertForPreTraining(vocab_size=2000, hidden_size=128, num_layers=2, num_heads=4,
                               ffn_hidden_size=512, init_std=0.02)
    emb = model.bert.embeddings.word_embeddings.weight
    assert emb[1:].std().item() == pytest.approx(0.02, rel=0.03)
    assert torch.all(emb[0] == 0)  # pad_token_id row, as Hugging Face BERT
    fc1 = model.bert.blocks[1].mlp.fc1
    assert fc1.weight.std().item() == pytest.approx(0.02, rel=0.03) and torch.all(fc1.bias == 0)
    assert torch.all(model.mlm_head.bias == 0) and torch.all(model.mlm_head.norm.weight == 1)
    names = list(model.state_dict())
    assert sum("word_embeddings" in n for n in names) == 1 and not any("decoder" in n for n in names)
    with torch.no_grad():  # the decoder reads the embedding: changing one row changes its logit
        ids = torch.tensor([[5, 6, 7]])
        before, _ = model.eval().logits(ids)
        emb[42] += 1.0
        after, _ = model.logits(ids)
    assert not torch.equal(before[..., 42], after[..., 42])
    torch.testing.assert_close(before[..., 41], after[..., 41])


def test_meta_build_then_to_empty_and_init_weights():
    with torch.device("meta"):
        model = BertForPreTraining(**TINY)
    assert all(p.is_meta for p in model.parameters())
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    out = model(batch())
    assert all(torch.isfinite(v) for k, v in out.items() if "loss" in k)
    assert torch.all(model.bert.embeddings.word_embeddings.weight[0] == 0)
    assert torch.all(model.mlm_head.bias == 0)
    assert len({p.data_ptr() for p in model.parameters()}) == len(list(model.parameters()))


def test_bert_large_parameter_count_matches_hugging_face_on_meta():
    transformers = pytest.importorskip("transformers")
    dims = dict(vocab_size=30522, hidden_size=1024, num_layers=24, num_heads=16,
                ffn_hidden_size=4096, max_position_embeddings=512)
    with torch.device("meta"):
        ours = BertForPreTraining(**dims)
        ours_mlm = BertForPreTraining(**dims, second_head=None)
        cfg = transformers.BertConfig(
            vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
            intermediate_size=4096, max_position_embeddings=512)
        hf = transformers.BertForPreTraining(cfg)
        hf_mlm = transformers.BertForMaskedLM(cfg)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(ours) == count(hf) == 336_226_108
    assert count(ours_mlm) == count(hf_mlm)


def test_errors_are_one_line_libai_errors():
    cases = [
        (ConfigError, "hidden_size 30 is not divisible by model.num_heads 4",
         lambda: BertForPreTraining(**(TINY | dict(hidden_size=30)))),
        (ConfigError, "Did you mean 'gelu'", lambda: BertModel(**TINY, activation="gelu2")),
        (ConfigError, "Did you mean 'sop'", lambda: BertForPreTraining(**TINY, second_head="spo")),
        (DataError, "sequence length 65 > max_position_embeddings 64",
         lambda: BertForPreTraining(**TINY)(dict(input_ids=torch.ones(1, 65, dtype=torch.long),
                                                 mlm_labels=torch.ones(1, 65, dtype=torch.long)))),
        (DataError, "needs 'next_sentence_label'",
         lambda: BertForPreTraining(**TINY)({k: v for k, v in batch().items()
                                             if k != "next_sentence_label"})),
        (DataError, "needs 'mlm_labels'",
         lambda: BertForPreTraining(**TINY)(dict(input_ids=torch.ones(1, 4, dtype=torch.long)))),
    ]
    for cls, text, fn in cases:
        with pytest.raises(cls) as exc:
            fn()
        assert isinstance(exc.value, LibaiError) and text in str(exc.value)
        assert "\n" not in str(exc.value)


def test_sequence_classification_contract():
    torch.manual_seed(0)
    model = BertForSequenceClassification(**TINY, num_classes=3, classifier_dropout=0.0)
    b = dict(input_ids=torch.randint(1, 99, (4, 10)), labels=torch.tensor([0, 1, 2, 1]))
    out = model(b)
    assert set(out) == {"loss"}
    out["loss"].backward()
    model.eval()
    assert model(b)["logits"].shape == (4, 3) and set(model(b)) == {"logits", "loss"}
    assert set(model({"input_ids": b["input_ids"]})) == {"logits"}
    with pytest.raises(DataError, match="needs 'labels'"):
        model.train()({"input_ids": b["input_ids"]})


def test_registry_builds_and_exposes_data_facing_attributes():
    model = MODELS.build(dict(type="BertForPreTraining", **TINY))
    assert model.vocab_size == 99 and model.max_position_embeddings == 64
    assert isinstance(model.bert.blocks, torch.nn.ModuleList) and len(model.bert.blocks) == 2
    encoder = MODELS.build(dict(type="BertModel", **TINY))
    h, pooled = encoder(torch.randint(0, 99, (2, 5)))
    assert h.shape == (2, 5, 32) and pooled.shape == (2, 32)
    assert MODELS.build(dict(type="BertForSequenceClassification", **TINY)).vocab_size == 99


def test_one_config_object_or_its_fields_as_keywords():
    from libai.model import BertClassifierConfig, BertConfig, BertPreTrainingConfig
    from libai.utils.errors import BuildError

    torch.manual_seed(0)
    by_kwargs = BertForPreTraining(**TINY, second_head="sop")
    torch.manual_seed(0)
    by_config = BertForPreTraining(BertPreTrainingConfig(**TINY, second_head="sop"))
    assert by_kwargs.config == by_config.config and by_config.second_head == "sop"
    for a, b in zip(by_kwargs.state_dict().values(), by_config.state_dict().values()):
        assert torch.equal(a, b)
    assert isinstance(by_config.bert.config, BertConfig)
    assert type(by_config.bert.config) is BertConfig  # the encoder gets the shared fields only
    # keywords go on top of a config object or dict
    assert BertModel(BertConfig(**TINY), num_layers=1).config.num_layers == 1
    assert BertModel(dict(TINY), pre_norm=True).config.pre_norm
    clf = BertForSequenceClassification(BertClassifierConfig(**TINY, num_classes=5))
    assert clf.classifier.out_features == 5 and dict(clf.config)["num_classes"] == 5
    with pytest.raises(ConfigError, match="unexpected argument 'num_layer'. Did you mean 'num_layers'"):
        BertForPreTraining(num_layer=2)
    with pytest.raises(ConfigError, match="unexpected argument 'second_head'"):
        BertForSequenceClassification(second_head=None)
    # the registry checks names and kinds before the call, as for any class
    with pytest.raises(BuildError, match="got an unexpected argument 'hiden_size'. Did you mean"):
        MODELS.build(dict(type="BertForPreTraining", hiden_size=32))
    with pytest.raises(BuildError, match="model.hidden_size='big': expected a whole number"):
        MODELS.build(dict(type="BertForPreTraining", hidden_size="big"), path="model")


def test_a_metric_for_the_head_that_is_off_names_the_setting():
    """An NSP metric on an MLM-only model: the evaluation's error names model.second_head (the
    evaluation loop asks the model, ``why_no_output``), not only the missing output key."""
    from libai.evaluator import Evaluator
    from libai.loops.evaluate import _process

    model = BertForPreTraining(**TINY, second_head=None).eval()
    b = batch()
    with torch.no_grad():
        out = model(b)
    evaluator = Evaluator([dict(type="Accuracy", pred_key="nsp_logits",
                                label_key="next_sentence_label")])
    with pytest.raises(ConfigError) as e:
        _process(evaluator, b, out, model)
    assert "model.second_head=None" in str(e.value) and "'nsp_logits'" in str(e.value)
    assert model.why_no_output("mlm_logits") is None
