"""GPT-2: batch contract, tied head, GPT-2 init, meta building, generation with a KV cache."""

import math

import pytest
import torch
import torch.nn.functional as F

from libai.model import GPTForCausalLM, GPTModel
from libai.registry import MODELS
from libai.utils.errors import ConfigError, DataError, LibaiError

TINY = dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64)


def lm_batch(B=2, S=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 99, (B, S + 1), generator=g)
    labels = tokens[:, 1:].clone()
    labels[1, -3:] = -100  # nothing to predict at the end of the second sequence
    return dict(input_ids=tokens[:, :-1], labels=labels)


def greedy_without_cache(model, ids, new):
    """Reference decoding: recompute the whole (cropped) context for every token."""
    for _ in range(new):
        logits = model.logits(ids[:, -model.max_position_embeddings:])[:, -1]
        ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids


def test_train_and_eval_outputs():
    torch.manual_seed(0)
    model = GPTForCausalLM(**TINY, hidden_dropout=0.0, attention_dropout=0.0)
    b = lm_batch()
    train = model(b)
    assert set(train) == {"loss", "num_items"} and train["loss"].ndim == 0
    assert train["num_items"] == {"loss": 29}  # the tokens predicted (not -100)
    logits = model.logits(b["input_ids"])
    torch.testing.assert_close(train["loss"], F.cross_entropy(logits.flatten(0, 1),
                                                              b["labels"].flatten()))
    model.eval()
    with torch.no_grad():
        out = model(b)
    assert set(out) == {"loss", "nll_sum", "num_tokens", "num_correct", "num_items"}
    assert out["num_tokens"].tolist() == [16, 13] and out["nll_sum"].dtype == torch.float32
    torch.testing.assert_close(out["nll_sum"].sum() / out["num_tokens"].sum(), train["loss"].detach())
    torch.testing.assert_close(out["loss"], train["loss"].detach())
    assert out["num_correct"].shape == (2,) and out["num_correct"].dtype == torch.long
    assert model({"input_ids": b["input_ids"]})["logits"].shape == (2, 16, 99)
    with pytest.raises(DataError, match="needs 'labels'"):
        model.train()({"input_ids": b["input_ids"]})


def test_causal_future_tokens_do_not_change_the_past():
    torch.manual_seed(0)
    model = GPTForCausalLM(**TINY).eval()
    ids = torch.randint(0, 99, (1, 10))
    other = ids.clone()
    other[0, 6:] = 5
    torch.testing.assert_close(model.logits(ids)[:, :6], model.logits(other)[:, :6])


def test_loss_falls_with_adamw_on_a_fixed_batch():
    torch.manual_seed(0)
    model = GPTForCausalLM(**TINY)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    b, losses = lm_batch(), []
    for _ in range(20):
        loss = model(b)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0], losses


def test_gpt2_init_is_residual_scaled_and_head_tied():
    torch.manual_seed(0)
    model = GPTForCausalLM(vocab_size=1000, hidden_size=256, num_layers=4, num_heads=4)
    block = model.transformer.blocks[2]
    assert block.mlp.fc1.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert block.attn.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.03)
    for w in (block.attn.out_proj.weight, block.mlp.fc2.weight):
        assert w.std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.03)
    assert block.mlp.fc1.out_features == 1024  # ffn_hidden_size None -> 4 * hidden_size
    assert torch.all(block.attn.out_proj.bias == 0) and torch.all(block.mlp_norm.weight == 1)
    emb = model.transformer.embeddings
    assert emb.position_embeddings.weight.std().item() == pytest.approx(0.02, rel=0.03)
    assert emb.token_type_embeddings is None and emb.norm is None
    assert model.transformer.final_norm is not None and block.pre_norm
    assert sum("word_embeddings" in k for k in model.state_dict()) == 1
    ids = torch.tensor([[1, 2, 3]])
    h = model.eval().transformer(ids)
    torch.testing.assert_close(model.logits(ids), h @ emb.word_embeddings.weight.T)


def test_meta_build_then_to_empty_and_init_weights():
    with torch.device("meta"):
        model = GPTForCausalLM(**TINY)
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    loss = model(lm_batch())["loss"]
    assert torch.isfinite(loss) and abs(loss.item() - math.log(99)) < 1.0
    loss.backward()
    assert model.transformer.embeddings.word_embeddings.weight.grad is not None


def test_gpt2_small_parameter_count_matches_hugging_face_on_meta():
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        ours = MODELS.build(dict(type="GPTForCausalLM"))
        hf = transformers.GPT2LMHeadModel(transformers.GPT2Config())
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(ours) == count(hf) == 124_439_808
    assert ours.vocab_size == 50257 and ours.max_position_embeddings == 1024


def test_cached_greedy_equals_uncached_token_by_token():
    torch.manual_seed(0)
    model = GPTForCausalLM(**(TINY | dict(max_position_embeddings=16))).eval()
    prompt = torch.randint(0, 99, (2, 5))
    with torch.no_grad():
        cached = model.generate(prompt, max_new_tokens=20)  # runs past 16: cropped context
        reference = greedy_without_cache(model, prompt, 20)
    assert cached.shape == (2, 25) and torch.equal(cached[:, :5], prompt)
    assert torch.equal(cached, reference)


def test_sampling_is_reproducible_and_respects_top_k_top_p():
    torch.manual_seed(0)
    model = GPTForCausalLM(**TINY).eval()
    prompt = torch.randint(0, 99, (3, 4))

    def sample(seed, **kw):
        return model.generate(prompt, 8, do_sample=True, temperature=0.8,
                              generator=torch.Generator().manual_seed(seed), **kw)

    assert torch.equal(sample(1, top_k=5, top_p=0.9), sample(1, top_k=5, top_p=0.9))
    assert not torch.equal(sample(1), sample(2))
    assert torch.equal(sample(3, top_k=1), model.generate(prompt, 8))  # top-1 = greedy
    assert torch.equal(sample(4, top_p=1e-6), model.generate(prompt, 8))  # nucleus of one
    out = sample(5, top_k=3)
    ids = prompt
    for t in range(8):  # every sampled token was among the 3 most likely at its step
        top3 = model.logits(ids)[:, -1].topk(3).indices
        assert (top3 == out[:, 4 + t, None]).any(1).all()
        ids = out[:, : 5 + t]


def test_eos_stops_finished_sequences():
    torch.manual_seed(0)
    model = GPTForCausalLM(**TINY).eval()
    prompt = torch.randint(0, 99, (2, 4))
    greedy = model.generate(prompt, 6)
    eos = int(greedy[0, 5])  # the first sequence produces it by its second new token
    stop = next(i for i in range(4, 10) if greedy[0, i] == eos)
    out = model.generate(prompt, 6, eos_token_id=eos)
    assert out.shape == (2, 10) and torch.equal(out[0, : stop + 1], greedy[0, : stop + 1])
    assert torch.all(out[0, stop:] == eos)  # finished: eos repeated
    only = model.generate(prompt[:1], 6, eos_token_id=eos)
    assert torch.equal(only, greedy[:1, : stop + 1])  # every sequence finished: stops early


def test_errors_are_one_line_libai_errors():
    cases = [
        (ConfigError, "not divisible", lambda: GPTModel(**(TINY | dict(num_heads=5)))),
        (ConfigError, "Did you mean 'gelu_tanh'",
         lambda: GPTForCausalLM(**TINY, activation="gelu_tan")),
        (DataError, "sequence length 65 > max_position_embeddings 64: shorten",
         lambda: GPTForCausalLM(**TINY)(dict(input_ids=torch.zeros(1, 65, dtype=torch.long),
                                             labels=torch.zeros(1, 65, dtype=torch.long)))),
    ]
    for cls, text, fn in cases:
        with pytest.raises(cls) as exc:
            fn()
        assert isinstance(exc.value, LibaiError) and text in str(exc.value)
        assert "\n" not in str(exc.value)


def test_one_config_object_or_its_fields_as_keywords():
    from libai.model import GPTConfig

    torch.manual_seed(0)
    by_kwargs = GPTForCausalLM(**TINY)
    torch.manual_seed(0)
    by_config = GPTForCausalLM(GPTConfig(**TINY))
    assert by_kwargs.config == by_config.config == GPTConfig(**TINY)
    assert by_config.transformer.config is by_config.config
    for a, b in zip(by_kwargs.state_dict().values(), by_config.state_dict().values()):
        assert torch.equal(a, b)
    assert {"type": "GPTForCausalLM", **by_config.config}["num_layers"] == TINY["num_layers"]
    with pytest.raises(ConfigError, match="Did you mean 'num_heads'"):
        GPTModel(num_head=2)
    with pytest.raises(ConfigError, match=r"GPTModel\(config=...\) takes a GPTConfig"):
        GPTModel(3)
