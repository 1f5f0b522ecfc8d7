"""Hugging Face weights both ways: equal logits after loading and after exporting; load_from."""

import json
import os
import sys

import pytest
import torch

from libai.model import from_hf_pretrained, load_hf_pretrained, save_hf_pretrained
from libai.model.zoo.hf import hf_state_dict_for, read_hf_folder
from libai.registry import MODELS
from libai.runner import Runner
from libai.utils.errors import CheckpointError

transformers = pytest.importorskip("transformers")

BERT = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=37, max_position_embeddings=64)
GPT2 = dict(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
            eos_token_id=0)
TOL = dict(atol=1e-5, rtol=0)


def hf_model(cls, config, seed=0):
    torch.manual_seed(seed)
    model = cls(config).eval()
    with torch.no_grad():  # random biases and norms, so a mapping mistake cannot hide
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name or "ln_" in name:
                p.normal_(0, 0.1 if name.endswith("bias") else 1.0)
    return model


def save(model, folder, form="safetensors"):
    model.save_pretrained(folder)
    if form == "bin":  # transformers 5 writes safetensors only: write the legacy file by hand
        os.remove(os.path.join(folder, "model.safetensors"))
        torch.save(model.state_dict(), os.path.join(folder, "pytorch_model.bin"))
    return str(folder)


def bert_inputs():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 99, (3, 11), generator=g)
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = 0  # a padded sequence
    ids[1, 7:] = 0
    types = torch.zeros(3, 11, dtype=torch.long)
    types[:, 5:] = 1
    return ids, mask, types


def assert_loads_cleanly(cls, folder):
    model, info = cls.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"], info
    return model.eval()


@pytest.mark.parametrize("form", ["safetensors", "bin"])
@pytest.mark.parametrize("hf_cls", ["BertForPreTraining", "BertForMaskedLM"])
def test_bert_loads_with_equal_logits_and_exports_back(tmp_path, hf_cls, form):
    cls = getattr(transformers, hf_cls)
    hf = hf_model(cls, transformers.BertConfig(**BERT))
    ours = from_hf_pretrained(save(hf, tmp_path / "hf", form)).eval()
    assert type(ours).__name__ == "BertForPreTraining"
    assert ours.second_head == ("nsp" if hf_cls == "BertForPreTraining" else None)
    ids, mask, types = bert_inputs()
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
        mlm, nsp = ours.logits(ids, mask, types)
    hf_mlm = expected.logits if hf_cls == "BertForMaskedLM" else expected.prediction_logits
    torch.testing.assert_close(mlm, hf_mlm, **TOL)
    if hf_cls == "BertForPreTraining":
        torch.testing.assert_close(nsp, expected.seq_relationship_logits, **TOL)
    else:
        assert nsp is None

    save_hf_pretrained(ours, tmp_path / "back")
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["architectures"] == [hf_cls] and config["tie_word_embeddings"] is True
    back = assert_loads_cleanly(cls, tmp_path / "back")
    with torch.no_grad():
        again = back(input_ids=ids, attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(again.logits if hf_cls == "BertForMaskedLM"
                               else again.prediction_logits, hf_mlm, **TOL)
    with torch.no_grad():  # one tensor for the embeddings and the decoder
        assert back.get_output_embeddings().weight is back.bert.embeddings.word_embeddings.weight


@pytest.mark.parametrize("form", ["safetensors", "bin", "sharded"])
def test_gpt2_loads_with_equal_logits_and_exports_back(tmp_path, form):
    hf = hf_model(transformers.GPT2LMHeadModel, transformers.GPT2Config(**GPT2))
    if form == "sharded":
        hf.save_pretrained(tmp_path / "hf", max_shard_size="20KB")
        assert (tmp_path / "hf" / "model.safetensors.index.json").exists()
        folder = str(tmp_path / "hf")
    else:
        folder = save(hf, tmp_path / "hf", form)
    ours = from_hf_pretrained(folder).eval()
    ids = torch.randint(0, 99, (2, 13))
    with torch.no_grad():
        expected = hf(ids).logits
        torch.testing.assert_close(ours.logits(ids), expected, **TOL)
    save_hf_pretrained(ours, tmp_path / "back")
    back = assert_loads_cleanly(transformers.GPT2LMHeadModel, tmp_path / "back")
    with torch.no_grad():
        torch.testing.assert_close(back(ids).logits, expected, **TOL)


def test_gpt2_hub_layout_without_prefix_and_with_buffers(tmp_path):
    """The hub's gpt2 files: keys without 'transformer.', old attn.bias buffers, lm_head copy."""
    hf = hf_model(transformers.GPT2LMHeadModel, transformers.GPT2Config(**GPT2))
    state = {k.removeprefix("transformer."): v.clone() for k, v in hf.state_dict().items()}
    state["lm_head.weight"] = state["wte.weight"].clone()
    for i in range(2):
        state[f"h.{i}.attn.bias"] = torch.ones(1, 1, 64, 64).tril()
        state[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    folder = tmp_path / "hub"
    folder.mkdir()
    hf.config.to_json_file(folder / "config.json")
    torch.save(state, folder / "pytorch_model.bin")
    ours = from_hf_pretrained(folder).eval()
    ids = torch.randint(0, 99, (1, 9))
    with torch.no_grad():
        torch.testing.assert_close(ours.logits(ids), hf(ids).logits, **TOL)
    state["lm_head.weight"] += 1  # an untied head cannot load into a tied model
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="lm_head.weight differs from the word embeddings"):
        load_hf_pretrained(folder)


def test_sequence_classification_both_ways(tmp_path):
    config = transformers.BertConfig(**BERT, num_labels=3)
    hf = hf_model(transformers.BertForSequenceClassification, config)
    ours = from_hf_pretrained(save(hf, tmp_path / "hf")).eval()
    assert type(ours).__name__ == "BertForSequenceClassification" and ours.classifier.out_features == 3
    ids, mask, types = bert_inputs()
    batch = dict(input_ids=ids, attention_mask=mask, token_type_ids=types)
    with torch.no_grad():
        expected = hf(**batch).logits
        torch.testing.assert_close(ours(batch)["logits"], expected, **TOL)
    save_hf_pretrained(ours, tmp_path / "back")
    back = assert_loads_cleanly(transformers.BertForSequenceClassification, tmp_path / "back")
    with torch.no_grad():
        torch.testing.assert_close(back(**batch).logits, expected, **TOL)


def test_safetensors_is_optional_with_a_clear_error(tmp_path, monkeypatch):
    model = MODELS.build(TINY_GPT)
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import fails as if not installed
    with pytest.raises(CheckpointError, match="pip install safetensors"):
        save_hf_pretrained(model, tmp_path)


def test_converted_config_builds_the_same_model(tmp_path):
    folder = save(hf_model(transformers.BertForPreTraining,
                           transformers.BertConfig(**BERT, hidden_act="gelu_new")), tmp_path)
    cfg, state = load_hf_pretrained(folder)
    assert cfg == dict(type="BertForPreTraining", vocab_size=99, hidden_size=32, num_layers=2,
                       num_heads=4, ffn_hidden_size=37, max_position_embeddings=64,
                       type_vocab_size=2, hidden_dropout=0.1, attention_dropout=0.1,
                       activation="gelu_tanh", layer_norm_eps=1e-12, init_std=0.02,
                       pad_token_id=0, second_head="nsp")
    model = MODELS.build(cfg)
    model.load_state_dict(state, strict=True)


def test_bad_folders_and_unsupported_models_are_checkpoint_errors(tmp_path):
    with pytest.raises(CheckpointError, match="is not a Hugging Face model folder"):
        read_hf_folder(tmp_path / "nope")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(CheckpointError, match="no model.safetensors or pytorch_model.bin"):
        read_hf_folder(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="cannot read weights from .*model.safetensors"):
        read_hf_folder(tmp_path)
    distil = transformers.DistilBertConfig(vocab_size=99, dim=32, n_layers=1, n_heads=4,
                                           hidden_dim=37)
    transformers.DistilBertForMaskedLM(distil).save_pretrained(tmp_path / "distilbert")
    with pytest.raises(CheckpointError) as exc:
        load_hf_pretrained(tmp_path / "distilbert")
    assert "model_type 'distilbert'" in str(exc.value) and "'bert'" in str(exc.value)
    with pytest.raises(CheckpointError, match="pre_norm=True BERT has no Hugging Face"):
        save_hf_pretrained(MODELS.build(dict(type="BertForPreTraining", vocab_size=99,
                                             hidden_size=32, num_layers=1, num_heads=4,
                                             ffn_hidden_size=37, pre_norm=True)), tmp_path / "x")
    families = "BERT, GPT-2, Llama and RoBERTa"  # every family that exports, named
    with pytest.raises(CheckpointError, match=f"DigitsMLP has no Hugging Face equivalent: libai "
                                              f"exports its {families}"):
        save_hf_pretrained(MODELS.build(dict(type="DigitsMLP")), tmp_path / "y")


# ----------------------------------------------------------------------------- load_from
TINY_GPT = dict(type="GPTForCausalLM", vocab_size=99, hidden_size=32, num_layers=2, num_heads=4,
                max_position_embeddings=64)


@pytest.fixture
def gpt2_folder(tmp_path):
    hf = hf_model(transformers.GPT2LMHeadModel, transformers.GPT2Config(**GPT2))
    return save(hf, tmp_path / "gpt2"), hf


def make_runner(tmp_path, model, **cfg):
    return Runner.from_cfg(dict(model=model, work_dir=str(tmp_path / "work"),
                                log_level="WARNING", **cfg))


def test_runner_loads_a_hugging_face_folder(tmp_path, gpt2_folder, test_device):
    folder, hf = gpt2_folder
    runner = make_runner(tmp_path, TINY_GPT)
    report = runner.checkpointer.load_weights(folder)
    assert report.ok and not report.missing
    ids = torch.randint(0, 99, (2, 7))
    with torch.no_grad():
        expected = hf(ids).logits.to(test_device)  # transformers on the CPU, the reference
    # the runner's model on its device (CUDA where there is one): float32 without TF32, whose
    # kernels sum in another order than the CPU's; 1e-5 on the CPU, where the kernels are alike
    tol = TOL if test_device.type == "cpu" else dict(atol=1e-4, rtol=0)
    model = runner.unwrapped_model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model.logits(ids.to(test_device)), expected, **tol)
    # the config route (load_from), as tools/test.py and tools/train.py use it
    runner = make_runner(tmp_path, TINY_GPT, load_from=dict(path=folder))
    runner.checkpointer.restore(weights_only=True)
    with torch.no_grad():
        torch.testing.assert_close(runner.unwrapped_model.eval().logits(ids.to(test_device)),
                                   expected, **tol)


def test_runner_refuses_other_dims_or_model_type_in_one_line(tmp_path, gpt2_folder):
    folder, _ = gpt2_folder
    runner = make_runner(tmp_path, TINY_GPT | dict(num_layers=3, hidden_size=64))
    with pytest.raises(CheckpointError) as exc:
        runner.checkpointer.load_weights(folder)
    msg = str(exc.value)
    assert "\n" not in msg and "hidden_size=32, num_layers=2" in msg
    assert "set model.hidden_size=32 model.num_layers=2 in the config" in msg
    bert = dict(type="BertForPreTraining", vocab_size=99, hidden_size=32, num_layers=2,
                num_heads=4, ffn_hidden_size=37, max_position_embeddings=64)
    with pytest.raises(CheckpointError) as exc:
        make_runner(tmp_path, bert).checkpointer.load_weights(folder)
    msg = str(exc.value)
    assert "\n" not in msg and "holds a 'gpt2' model" in msg and "BertForPreTraining" in msg
    assert "model.type='GPTForCausalLM'" in msg


def test_pretraining_weights_into_a_classifier_need_strict_false(tmp_path, test_device):
    folder = save(hf_model(transformers.BertForPreTraining, transformers.BertConfig(**BERT)),
                  tmp_path / "bert")
    classifier = dict(type="BertForSequenceClassification", vocab_size=99, hidden_size=32,
                      num_layers=2, num_heads=4, ffn_hidden_size=37, max_position_embeddings=64)
    runner = make_runner(tmp_path, classifier)
    with pytest.raises(CheckpointError, match="strict=False"):
        runner.checkpointer.load_weights(folder)
    report = runner.checkpointer.load_weights(folder, strict=False)
    assert any(k.startswith("classifier.") for k in report.missing)
    assert any(k.startswith("mlm_head.") for k in report.unexpected)
    state = hf_state_dict_for(runner.unwrapped_model, folder)  # read to the CPU
    # a load copies: exact on the model's device (CUDA where there is one)
    torch.testing.assert_close(runner.unwrapped_model.bert.blocks[1].attn.q_proj.weight,
                               state["bert.blocks.1.attn.q_proj.weight"].to(test_device),
                               atol=0, rtol=0)


def test_heads_are_told_apart_without_architectures():
    """Folders without ``architectures``: the weights say which head (pooler or not, score)."""
    from libai.model.zoo.hf import hf_to_libai

    config = dict(model_type="bert", vocab_size=99, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=4, intermediate_size=37, id2label={"0": "a", "1": "b",
                                                                         "2": "c"})
    state = {"bert.embeddings.word_embeddings.weight": torch.zeros(99, 32),
             "classifier.weight": torch.zeros(3, 32), "classifier.bias": torch.zeros(3)}
    cfg, _ = hf_to_libai(config, dict(state))
    assert cfg["type"] == "BertForTokenClassification" and cfg["num_classes"] == 3
    state["bert.pooler.dense.weight"] = torch.zeros(32, 32)
    cfg, _ = hf_to_libai(dict(config, problem_type="multi_label_classification"), state)
    assert cfg["type"] == "BertForSequenceClassification"
    assert cfg["problem_type"] == "multi_label_classification"
    gpt = dict(model_type="gpt2", vocab_size=99, n_embd=32, n_layer=2, n_head=4, pad_token_id=7)
    cfg, out = hf_to_libai(gpt, {"transformer.wte.weight": torch.zeros(99, 32),
                                 "score.weight": torch.zeros(2, 32)})
    assert cfg["type"] == "GPTForSequenceClassification" and cfg["pad_token_id"] == 7
    assert cfg["num_classes"] == 2 and "score.weight" in out
