"""Fine-tuning heads: logits and loss equal transformers' for the same weights, both ways (a
transformers folder loaded here, a libai model exported and loaded by transformers), for every
problem type; label names and the tokenizer in the export; libai2hf; the load report when a
pretraining checkpoint starts a classifier. Tolerance: float32, atol 1e-5 (rtol 0)."""

import json

import pytest
import torch

from libai.checkpoint import model_state_for_saving, save_checkpoint
from libai.cli import convert_checkpoint
from libai.data.text import TextTokenizer
from libai.model import (
    BertClassifierConfig,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    GPTForCausalLM,
    GPTForSequenceClassification,
    check_model,
    from_hf_pretrained,
    save_hf_pretrained,
)
from libai.runner import Runner
from libai.utils.errors import ConfigError, DataError

transformers = pytest.importorskip("transformers")

TOL = dict(atol=1e-5, rtol=0)
BERT_HF = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=37, max_position_embeddings=64)
GPT2_HF = dict(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
               eos_token_id=0, pad_token_id=0)
BERT = dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, ffn_hidden_size=37,
            max_position_embeddings=64)
GPT = dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64)
B, S = 3, 11
# (problem_type in the config, classes, labels): None infers the type from them, as HF does
PROBLEMS = {
    "single": (None, 3, lambda g: torch.randint(0, 3, (B,), generator=g)),
    "regression": (None, 1, lambda g: torch.randn(B, generator=g)),
    "multi": (None, 4, lambda g: torch.randint(0, 2, (B, 4), generator=g).float()),
    "explicit_regression": ("regression", 2, lambda g: torch.randn(B, 2, generator=g)),
}


def randomize(model, seed=0):
    """Random biases and norms too, so that a mapping mistake cannot hide behind zeros/ones."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.1)
            elif "norm" in name.lower() or "ln_" in name:
                p.normal_(1, 0.2)
            else:
                p.normal_(0, 0.05)
    return model.eval()


def inputs(seed=1):
    """A padded batch: row 1 holds 7 tokens, then padding (id 0, attention_mask 0)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 99, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[1, 7:], ids[1, 7:] = 0, 0
    types = torch.zeros(B, S, dtype=torch.long)
    types[:, 5:] = 1
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types), g


def hf_out(hf, batch, labels):
    with torch.no_grad():
        return hf(**batch, labels=labels)


def ours_out(model, batch, labels):
    with torch.no_grad():
        return model.eval()(dict(batch, labels=labels))


def assert_same(ours, theirs):
    torch.testing.assert_close(ours["logits"], theirs.logits, **TOL)
    torch.testing.assert_close(ours["loss"], theirs.loss, **TOL)


# ----------------------------------------------------------------------------- BERT sequence
@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_bert_sequence_classification_matches_transformers_both_ways(tmp_path, problem):
    problem_type, classes, make_labels = PROBLEMS[problem]
    batch, g = inputs()
    labels = make_labels(g)
    # transformers -> libai
    config = transformers.BertConfig(**BERT_HF, num_labels=classes, problem_type=problem_type)
    hf = randomize(transformers.BertForSequenceClassification(config))
    hf.save_pretrained(tmp_path / "hf")
    ours = from_hf_pretrained(tmp_path / "hf")
    assert type(ours) is BertForSequenceClassification
    assert ours.config.problem_type == problem_type and ours.config.num_classes == classes
    assert_same(ours_out(ours, batch, labels), hf_out(hf, batch, labels))
    # libai -> transformers, through the Auto class, with label names
    ours = randomize(BertForSequenceClassification(**BERT, num_classes=classes,
                                                   problem_type=problem_type), seed=2)
    names = [f"class {chr(97 + i)}" for i in range(classes)]
    save_hf_pretrained(ours, tmp_path / "out", label_names=names)
    back = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "out")
    assert type(back).__name__ == "BertForSequenceClassification"
    assert back.config.id2label == dict(enumerate(names)) and back.config.label2id["class a"] == 0
    assert back.config.problem_type == problem_type
    assert_same(ours_out(ours, batch, labels), hf_out(back.eval(), batch, labels))


def test_problem_type_is_inferred_per_batch_and_an_explicit_one_wins():
    model = BertForSequenceClassification(**BERT, num_classes=2).eval()
    batch, _ = inputs()
    with torch.no_grad():
        logits = model(batch)["logits"]
        ce = model(dict(batch, labels=torch.tensor([0, 1, 1])))["loss"]
        bce = model(dict(batch, labels=torch.tensor([[0.0, 1], [1, 0], [1, 1]])))["loss"]
    torch.testing.assert_close(ce, torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 1])))
    torch.testing.assert_close(bce, torch.nn.functional.binary_cross_entropy_with_logits(
        logits, torch.tensor([[0.0, 1], [1, 0], [1, 1]])))
    multi = BertForSequenceClassification(**BERT, num_classes=2,
                                          problem_type="multi_label_classification")
    with pytest.raises(DataError, match=r"'multi_label_classification' \(model.problem_type\) "
                                        r"and wants labels \(B, C\) float"):
        multi(dict(batch, labels=torch.tensor([0, 1, 1])))
    scorer = BertForSequenceClassification(**BERT, num_classes=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # targets and loss stay float32
        loss = scorer(dict(batch, labels=torch.tensor([0.123456, 1.0, -2.5])))["loss"]
    assert loss.dtype == torch.float32
    with pytest.raises(ConfigError, match="Did you mean 'regression'"):
        BertClassifierConfig(problem_type="regresion")
    with pytest.raises(ConfigError, match="token classification is single-label"):
        BertForTokenClassification(**BERT, problem_type="regression")


# ----------------------------------------------------------------------------- BERT tokens
def token_labels(batch, g, classes=5):
    labels = torch.randint(0, classes, (B, S), generator=g)
    labels[batch["attention_mask"] == 0] = -100  # padding
    labels[:, 0], labels[0, 3] = -100, -100  # [CLS], a word-piece continuation
    return labels


def test_bert_token_classification_matches_transformers_both_ways(tmp_path):
    batch, g = inputs()
    labels = token_labels(batch, g)
    hf = randomize(transformers.BertForTokenClassification(
        transformers.BertConfig(**BERT_HF, num_labels=5)))
    hf.save_pretrained(tmp_path / "hf")
    ours = from_hf_pretrained(tmp_path / "hf")
    assert type(ours) is BertForTokenClassification and ours.bert.pooler is None
    out = ours_out(ours, batch, labels)
    assert out["logits"].shape == (B, S, 5) and out["num_items"]["loss"] == (labels != -100).sum()
    assert_same(out, hf_out(hf, batch, labels))

    ours = randomize(BertForTokenClassification(**BERT, num_classes=5), seed=3)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    save_hf_pretrained(ours, tmp_path / "out", label_names=tags)
    back = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path / "out").eval()
    assert type(back).__name__ == "BertForTokenClassification"
    assert back.config.id2label[1] == "B-PER" and back.config.label2id["I-LOC"] == 4
    assert_same(ours_out(ours, batch, labels), hf_out(back, batch, labels))
    train = ours.train()(dict(batch, labels=labels))
    assert set(train) == {"loss", "num_items"} and train["loss"].requires_grad


# ----------------------------------------------------------------------------- GPT-2 sequence
@pytest.mark.parametrize("problem", ["single", "regression", "multi"])
def test_gpt_sequence_classification_matches_transformers_both_ways(tmp_path, problem):
    problem_type, classes, make_labels = PROBLEMS[problem]
    batch, g = inputs()
    batch.pop("token_type_ids")
    labels = make_labels(g)
    hf = randomize(transformers.GPT2ForSequenceClassification(
        transformers.GPT2Config(**GPT2_HF, num_labels=classes)))
    hf.save_pretrained(tmp_path / "hf")
    ours = from_hf_pretrained(tmp_path / "hf")
    assert type(ours) is GPTForSequenceClassification and ours.config.pad_token_id == 0
    expected = hf_out(hf, batch, labels)
    assert_same(ours_out(ours, batch, labels), expected)  # the last token from attention_mask
    no_mask = {k: v for k, v in batch.items() if k != "attention_mask"}
    assert_same(ours_out(ours, no_mask, labels), expected)  # from pad_token_id, as HF finds it
    assert ours.last_token(batch["input_ids"], batch["attention_mask"]).tolist() == [10, 6, 10]

    ours = randomize(GPTForSequenceClassification(**GPT, num_classes=classes, pad_token_id=0), 4)
    save_hf_pretrained(ours, tmp_path / "out")
    back = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "out")
    assert type(back).__name__ == "GPT2ForSequenceClassification"
    assert back.config.pad_token_id == 0 and back.config.id2label[0] == "LABEL_0"
    assert_same(ours_out(ours, batch, labels), hf_out(back.eval(), batch, labels))


def test_gpt_classifier_without_pad_id_scores_the_last_position():
    model = GPTForSequenceClassification(**GPT, num_classes=2).eval()
    ids = torch.randint(1, 99, (2, 6))
    assert model.last_token(ids).tolist() == [5, 5]
    with torch.no_grad():  # causal: the state at position 3 does not see what follows
        cut = model({"input_ids": ids[:, :4]})["logits"]
        masked = model({"input_ids": ids, "attention_mask": torch.tensor([[1] * 4 + [0] * 2] * 2)})
    torch.testing.assert_close(masked["logits"], cut, **TOL)


@pytest.mark.parametrize("build", [
    lambda: BertForSequenceClassification(**BERT), lambda: BertForTokenClassification(**BERT),
    lambda: GPTForSequenceClassification(**GPT)])
def test_heads_follow_the_model_contract(build):
    from libai.registry import MODELS

    model = build()
    assert check_model(model) == []
    again = MODELS.build(dict(type=type(model).__name__, **model.config))
    assert list(again.state_dict()) == list(model.state_dict())
    with pytest.raises(DataError, match="needs 'labels'"):
        model.train()({"input_ids": torch.randint(1, 99, (2, 5))})


# ----------------------------------------------------------------------------- export errors
def test_label_names_must_fit_the_model(tmp_path):
    with pytest.raises(ConfigError, match="must be 3 distinct names"):
        save_hf_pretrained(BertForSequenceClassification(**BERT, num_classes=3), tmp_path,
                           label_names=["a", "b"])
    with pytest.raises(ConfigError, match="has no classes to name"):
        save_hf_pretrained(BertForPreTraining(**BERT), tmp_path, label_names=["a"])


# ----------------------------------------------------------------------------- the tokenizer
TEXT = ["The quick brown fox jumps over the lazy dog.", "ROMEO: But soft, what light breaks?",
        "Café déjà vu, a naïve résumé!", "Juliet is the sun; arise, fair sun."] * 5
SENTENCE, PAIR = "The Sun breaks, ROMEO!", ("What light?", "A quick fox; the lazy café.")


@pytest.mark.parametrize("lowercase", [True, False])
def test_bert_export_writes_a_tokenizer_that_frames_as_libai(tmp_path, lowercase):
    tok = TextTokenizer.train(TEXT, "wordpiece", vocab_size=99, min_frequency=1,
                              lowercase=lowercase)
    written = save_hf_pretrained(BertForSequenceClassification(**BERT), tmp_path, tokenizer=tok)
    assert written[-1] == "config.json" and {"tokenizer.json", "vocab.txt"} <= set(written)
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert hf.model_max_length == 64 and hf.pad_token_id == tok.pad_id
    cls, sep = tok.cls_id, tok.sep_id
    assert hf(SENTENCE)["input_ids"] == [cls, *tok.encode(SENTENCE), sep]
    a, b = tok.encode(PAIR[0]), tok.encode(PAIR[1])
    enc = hf(*PAIR)
    assert enc["input_ids"] == [cls, *a, sep, *b, sep]
    assert enc["token_type_ids"] == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    vocab = (tmp_path / "vocab.txt").read_text().splitlines()
    assert vocab[cls] == "[CLS]" and len(vocab) == tok.vocab_size


def test_gpt_export_writes_its_tokenizer_and_frames_a_classifier_with_eot(tmp_path):
    tok = TextTokenizer.train(TEXT, "bpe", vocab_size=400, min_frequency=1)
    lm = GPTForCausalLM(**GPT | dict(vocab_size=400))
    save_hf_pretrained(lm, tmp_path / "lm", tokenizer=tok)
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path / "lm")
    assert hf(SENTENCE)["input_ids"] == tok.encode(SENTENCE)  # a prompt gets no token added
    config = json.loads((tmp_path / "lm" / "config.json").read_text())
    assert config["eos_token_id"] == config["bos_token_id"] == tok.eod_id

    unused = tok.token_to_id("<|unused_0|>")  # the text fills 400 ids with fewer tokens
    assert unused is not None
    clf = GPTForSequenceClassification(**GPT | dict(vocab_size=400), pad_token_id=unused)
    save_hf_pretrained(clf, tmp_path / "clf", tokenizer=tok)
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path / "clf")
    eot = tok.eod_id  # LabeledTextDataset's framing: text <eot> (pair <eot>)
    assert hf(SENTENCE)["input_ids"] == [*tok.encode(SENTENCE), eot]
    assert hf(*PAIR)["input_ids"] == [*tok.encode(PAIR[0]), eot, *tok.encode(PAIR[1]), eot]
    assert hf.pad_token_id == unused
    enc = hf([SENTENCE, PAIR[0]], padding=True, return_tensors="pt")
    back = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "clf")
    with torch.no_grad():  # HF finds the last token by the pad id, libai by the mask
        torch.testing.assert_close(clf.eval()(dict(enc))["logits"], back.eval()(**enc).logits,
                                   **TOL)
    with pytest.raises(ConfigError, match="would score the token before it"):
        save_hf_pretrained(GPTForSequenceClassification(**GPT | dict(vocab_size=400),
                                                        pad_token_id=eot), tmp_path / "x",
                           tokenizer=tok)
    with pytest.raises(ConfigError, match="exports with a wordpiece tokenizer"):
        save_hf_pretrained(BertForSequenceClassification(**BERT), tmp_path / "y", tokenizer=tok)


# ----------------------------------------------------------------------------- libai2hf
def test_libai2hf_writes_label_names_and_the_tokenizer(tmp_path, capsys):
    tok = TextTokenizer.train(TEXT, "wordpiece", vocab_size=99, min_frequency=1)
    tok.save(tmp_path / "tok")
    model = randomize(BertForSequenceClassification(**BERT, num_classes=3))
    meta = {"dataset_meta": {"classes": ("comedy", "history", "tragedy")}}
    save_checkpoint({"state_dict": model_state_for_saving(model), "meta": meta},
                    tmp_path / "clf.pth")
    model_cfg = dict(type="BertForSequenceClassification", num_classes=3, **BERT)
    (tmp_path / "cfg.py").write_text(f"model = {model_cfg!r}\n")
    out = tmp_path / "hf"
    convert_checkpoint.main(["libai2hf", str(tmp_path / "cfg.py"), str(tmp_path / "clf.pth"),
                             str(out), "--tokenizer", str(tmp_path / "tok")])
    printed = capsys.readouterr().out
    assert "model.safetensors, tokenizer.json" in printed and "config.json" in printed
    assert "id2label: {0: 'comedy', 1: 'history', 2: 'tragedy'}" in printed
    back = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert back.config.id2label == {0: "comedy", 1: "history", 2: "tragedy"}
    enc = transformers.AutoTokenizer.from_pretrained(out)(list(PAIR), padding=True,
                                                          return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(dict(enc))["logits"], back(**enc).logits, **TOL)

    # no class names in the checkpoint, no tokenizer in the config: the model, and two notes
    save_checkpoint({"state_dict": model_state_for_saving(model)}, tmp_path / "bare.pth")
    convert_checkpoint.main(["libai2hf", str(tmp_path / "cfg.py"), str(tmp_path / "bare.pth"),
                             str(tmp_path / "bare")])
    printed = capsys.readouterr().out
    assert "id2label: LABEL_0..LABEL_2" in printed and "holds no class names" in printed
    assert "no tokenizer written" in printed and "--tokenizer PATH" in printed
    assert not (tmp_path / "bare" / "tokenizer.json").exists()
    assert transformers.AutoConfig.from_pretrained(tmp_path / "bare").id2label[2] == "LABEL_2"


# ----------------------------------------------------------------------------- the load report
def test_a_pretraining_checkpoint_starts_a_head_and_the_report_says_what_is_new(tmp_path,
                                                                              test_device):
    pre = randomize(BertForPreTraining(**BERT))
    save_checkpoint({"state_dict": model_state_for_saving(pre)}, tmp_path / "pre.pth")
    hf = randomize(transformers.BertForPreTraining(transformers.BertConfig(**BERT_HF)), seed=5)
    hf.save_pretrained(tmp_path / "hf")
    for head in ("BertForSequenceClassification", "BertForTokenClassification"):
        for path in (tmp_path / "pre.pth", tmp_path / "hf"):
            runner = Runner.from_cfg(dict(
                model=dict(type=head, num_classes=5, **BERT), work_dir=str(tmp_path / "w"),
                log_level="WARNING", load_from=dict(path=str(path), strict=False)))
            runner.checkpointer.restore(weights_only=True)
            expected = (pre.bert.blocks[1].mlp.fc2.weight if path.suffix == ".pth"
                        else hf.bert.encoder.layer[1].output.dense.weight)
            # a load copies: exact on the runner's device (CUDA where there is one)
            torch.testing.assert_close(runner.unwrapped_model.bert.blocks[1].mlp.fc2.weight,
                                       expected.to(test_device), atol=0, rtol=0)
            report = str(runner.checkpointer.load_weights(str(path), strict=False))
            assert "Missing in the checkpoint (2; left as initialised):\n  classifier.* (2 keys)" \
                in report, report
            unused = report.split("Unexpected in the checkpoint", 1)[1]
            assert "; ignored):" in unused and "mlm_head" in unused and "sentence_head" in unused
            assert ("bert.pooler" in unused) == (head == "BertForTokenClassification")
