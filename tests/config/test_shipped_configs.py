"""The shipped configs: each loads, its model builds (on the meta device: no memory), and its
model agrees with its data on vocabulary and sequence length; the big ones have their
references' parameter counts."""

import os

import pytest
import torch

from libai.config import Config
from libai.registry import MODELS
from libai.runner import batch_fit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = ["bert_tiny", "bert_base", "bert_large", "gpt2_tiny", "gpt2_small", "roberta_tiny",
        "llama_tiny", "llama3_1b"]


def load(name):
    return Config.fromfile(os.path.join(ROOT, "configs", f"{name}.py"))


def meta_model(cfg):
    with torch.device("meta"):
        return MODELS.build(cfg.model.to_dict())


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", TEXT)
def test_text_config_model_fits_its_data(name):
    cfg = load(name)
    model = meta_model(cfg)
    for key in ("train_dataloader", "val_dataloader", "test_dataloader"):
        dataset = cfg[key].dataset
        assert dataset.corpus.tokenizer.vocab_size == model.vocab_size, key
        length = dataset.get("max_seq_length") or dataset.get("seq_length")
        assert length <= model.max_position_embeddings, key


def test_bert_large_has_the_parameters_of_hugging_face_bert_large():
    transformers = pytest.importorskip("transformers")
    cfg = load("bert_large")
    m = cfg.model
    assert (m.num_layers, m.hidden_size, m.num_heads, m.ffn_hidden_size) == (24, 1024, 16, 4096)
    assert cfg.train_dataloader.dataset.max_seq_length == 512
    hf_cfg = transformers.BertConfig(
        vocab_size=m.vocab_size, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
        intermediate_size=4096, max_position_embeddings=512)
    with torch.device("meta"):
        hf = transformers.BertForPreTraining(hf_cfg)
    assert n_params(meta_model(cfg)) == n_params(hf) == 336_226_108


def test_gpt2_small_has_124m_parameters():
    assert n_params(meta_model(load("gpt2_small"))) == 124_439_808


def test_big_configs_reach_their_global_batch_by_accumulation():
    for name, global_batch in (("bert_large", 256), ("bert_base", 256), ("gpt2_small", 512)):
        cfg = load(name)
        # batch_size='auto' (micro_batch=...) is resolved by the runner, on this CPU here
        fit = batch_fit.resolve(cfg, torch.device("cpu"), 1)
        micro = fit.micro if fit else cfg.train_dataloader.batch_size
        accumulation = fit.accumulation if fit else cfg.optim_wrapper.accumulative_counts
        assert micro * accumulation == global_batch, name


SHIPPED = sorted(f[:-3] for f in os.listdir(os.path.join(ROOT, "configs")) if f.endswith(".py"))


@pytest.mark.parametrize("name", SHIPPED)
def test_schedule_follows_any_run_length(name):
    """train_cfg.max_iters=N works for small and large N: the warm-up fits in the run and the
    decay reaches its end (the shipped schedules are written relative to the run)."""
    from libai.optim import build_param_schedulers

    cfg = load(name)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    for n in (1, 10, 100, 10**7):
        cfg.merge_from_options([f"train_cfg.max_iters={n}"])
        schedulers = build_param_schedulers(list(cfg.param_scheduler), opt, max_iters=n)
        assert all(s.begin < n or s.begin == s.end - 1 for s in schedulers), (name, n)
        assert max(s.end for s in schedulers) == max(n, schedulers[-1].begin + 1), (name, n)
