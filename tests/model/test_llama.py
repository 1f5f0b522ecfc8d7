"""Llama: batch contract, config checks, init, Hugging Face parity both ways (logits, greedy
generation, parameter counts), tensor parallel (the plan, the head-count refusal, 2 forked ranks
against one process), and the shipped configs (llama_tiny learns; llama3_1b's real
dimensions)."""

import json
import os

import pytest
import torch
import torch.nn.functional as F

from libai.model import from_hf_pretrained, load_hf_pretrained, save_hf_pretrained
from libai.model.layers import GrowingKVCache, RMSNorm, check_rope_scaling
from libai.model.zoo.hf import hf_state_dict_for
from libai.model.zoo.llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from libai.registry import MODELS
from libai.runner import batch_fit
from libai.utils.errors import CheckpointError, ConfigError, DataError

try:
    import transformers
except ImportError:  # the Hugging Face tests need it (requirements/hf.txt)
    transformers = None
needs_hf = pytest.mark.skipif(transformers is None, reason="needs transformers")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = dict(vocab_size=101, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
            ffn_hidden_size=96, max_position_embeddings=64, rope_theta=10000.0, rope_scaling=None)
SCALING = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position_embeddings=16)  # scales most of head_dim 16's frequencies
TOL = dict(atol=1e-5, rtol=0)


def lm_batch(B=2, S=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 101, (B, S + 1), generator=g)
    labels = tokens[:, 1:].clone()
    labels[1, -3:] = -100
    return dict(input_ids=tokens[:, :-1], labels=labels)


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- the model
def test_train_and_eval_outputs():
    torch.manual_seed(0)
    model = LlamaForCausalLM(**TINY)
    b = lm_batch()
    train = model(b)
    assert set(train) == {"loss", "num_items"} and train["num_items"] == {"loss": 29}
    torch.testing.assert_close(train["loss"], F.cross_entropy(
        model.logits(b["input_ids"]).flatten(0, 1), b["labels"].flatten()))
    model.eval()
    with torch.no_grad():
        out = model(b)
    assert set(out) == {"loss", "nll_sum", "num_tokens", "num_correct", "num_items"}
    assert out["num_tokens"].tolist() == [16, 13]
    torch.testing.assert_close(out["loss"], train["loss"].detach())
    assert model({"input_ids": b["input_ids"]})["logits"].shape == (2, 16, 101)
    with pytest.raises(DataError, match="needs 'labels'"):
        model.train()({"input_ids": b["input_ids"]})


def test_padding_and_the_future_do_not_change_a_sequence():
    torch.manual_seed(0)
    model = LlamaForCausalLM(**TINY).eval()
    ids = torch.randint(0, 101, (1, 10))
    other = ids.clone()
    other[0, 6:] = 5
    torch.testing.assert_close(model.logits(ids)[:, :6], model.logits(other)[:, :6])
    # the batch's attention_mask: right padding changes nothing before it, left padding gets
    # the positions the sequence has alone
    right = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 10), torch.zeros(1, 4)], 1).long()
    torch.testing.assert_close(model.logits(right, attention_mask=mask)[:, :10], model.logits(ids))
    left, mask = right.roll(4, 1), mask.roll(4, 1)
    torch.testing.assert_close(model.logits(left, attention_mask=mask)[:, 4:], model.logits(ids),
                               **TOL)
    labels = torch.cat([ids[:, 1:], torch.full((1, 5), -100)], 1)
    model.train()
    padded = model(dict(input_ids=right, labels=labels, attention_mask=mask.roll(-4, 1)))["loss"]
    alone = model(dict(input_ids=ids, labels=labels[:, :10]))["loss"]
    torch.testing.assert_close(padded, alone)


def test_kv_cache_grows_and_decodes_as_the_full_recomputation():
    cache = GrowingKVCache(1, 2, 4, max_length=10, initial_length=2)
    for n in (1, 2, 4):
        k = torch.randn(1, 2, n, 4)
        keys, _ = cache.update(k, k)
    assert cache.length == 7 and cache.keys.shape[2] == 8 and keys.shape == (1, 2, 7, 4)
    with pytest.raises(ValueError, match="holds 10 positions; 11 requested"):
        cache.update(torch.randn(1, 2, 4, 4), torch.randn(1, 2, 4, 4))
    torch.manual_seed(0)
    model = LlamaForCausalLM(**(TINY | dict(max_position_embeddings=16))).eval()
    assert isinstance(model.new_kv_caches(2)[0], GrowingKVCache)
    prompt = torch.randint(0, 101, (2, 5))
    ids = prompt
    with torch.no_grad():
        for _ in range(20):  # past 16: the context is cropped
            ids = torch.cat([ids, model.logits(ids[:, -16:])[:, -1].argmax(-1, keepdim=True)], 1)
        assert torch.equal(model.generate(prompt, 20), ids)


def test_llama_init_and_meta_build():
    torch.manual_seed(0)
    model = LlamaForCausalLM(**(TINY | dict(hidden_size=256, ffn_hidden_size=512,
                                            tie_word_embeddings=False, init_std=0.03)))
    block = model.transformer.blocks[1]
    for w in (block.attn.q_proj.weight, block.mlp.down_proj.weight, model.lm_head.weight,
              model.transformer.embed_tokens.weight):
        assert w.std().item() == pytest.approx(0.03, rel=0.05)
    assert isinstance(block.mlp_norm, RMSNorm) and torch.all(block.mlp_norm.weight == 1)
    assert all(m.bias is None for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert block.attn.k_proj.out_features == 2 * 64  # 2 key/value heads of 256 / 4
    with torch.device("meta"):
        model = LlamaForCausalLM(**TINY)
    model.to_empty(device="cpu")
    model.init_weights()
    loss = model(lm_batch())["loss"]
    assert abs(loss.item() - torch.log(torch.tensor(101.0)).item()) < 1.0
    assert sum("embed_tokens" in k for k in model.state_dict()) == 1  # tied: one matrix


@pytest.mark.parametrize("change, message", [
    (dict(num_kv_heads=3), "model.num_kv_heads=3 does not divide model.num_heads=4"),
    (dict(hidden_size=66), "model.hidden_size=66 is not divisible by model.num_heads=4"),
    (dict(head_dim=7), "the head width 7 (model.head_dim"),
    (dict(num_layers=-3), "model.num_layers=-3: expected a positive whole number"),
    (dict(rope_theta=0), "model.rope_theta=0: expected a positive number"),
    (dict(attention_dropout=1.5), "model.attention_dropout=1.5: expected in [0, 1]"),
    (dict(rope_scaling="zz_bad"), "model.rope_scaling='zz_bad': expected None or a dict"),
    (dict(rope_scaling=SCALING | dict(rope_type="yarn")), "model.rope_scaling.rope_type='yarn'"),
    (dict(rope_scaling=SCALING | dict(factr=2.0)), "unknown key 'factr'. Did you mean 'factor'"),
    (dict(rope_scaling=SCALING | dict(factor="zz_bad")), "model.rope_scaling.factor='zz_bad'"),
    (dict(rope_scaling=SCALING | dict(high_freq_factor=0.5)), "must exceed"),
])
def test_bad_config_is_one_line(change, message):
    with pytest.raises(ConfigError) as e:
        LlamaForCausalLM(**(TINY | change))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_config_defaults_and_registry():
    c = LlamaConfig()
    assert (c.kv_heads, c.head_size, c.rope_scaling["factor"]) == (8, 64, 32.0)
    assert type(c.rope_scaling) is dict and LlamaConfig(rope_scaling=None).kv_heads == 8
    assert LlamaConfig(num_kv_heads=None).kv_heads == 32
    old_spelling = {"type" if k == "rope_type" else k: v for k, v in SCALING.items()}
    assert check_rope_scaling(old_spelling | dict(factor=8)) == SCALING  # factor 8.0
    with pytest.raises(TypeError):
        LlamaConfig.__dataclass_fields__["rope_scaling"].default["factor"] = 1.0
    model = MODELS.build(dict(type="LlamaModel", **TINY))
    assert isinstance(model, LlamaModel) and dict(model.config)["num_kv_heads"] == 2


# ----------------------------------------------------------------------------- Hugging Face
def hf_llama(tied=True, scaling=None, seed=0, **extra):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=101, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=96, max_position_embeddings=64,
        rms_norm_eps=1e-5, rope_theta=500000.0 if scaling else 10000.0,
        rope_scaling=dict(scaling) if scaling else None,  # transformers writes into it
        tie_word_embeddings=tied, bos_token_id=None, eos_token_id=None, pad_token_id=0, **extra)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # every tensor moved off its init (norms start at 1), so that a
        for p in model.parameters():  # mapping mistake cannot hide
            p.add_(torch.randn_like(p) * 0.2)
    return model


@needs_hf
@pytest.mark.parametrize("scaling", [None, SCALING], ids=["rope", "llama3_rope"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_logits_equal_transformers_both_ways(tmp_path, tied, scaling):
    hf = hf_llama(tied, scaling)
    hf.save_pretrained(tmp_path / "hf")
    ours = from_hf_pretrained(tmp_path / "hf").eval()
    assert ours.config.tie_word_embeddings is tied and ours.config.rope_scaling == scaling
    ids = torch.randint(0, 101, (2, 40))
    with torch.no_grad():
        expected = hf(ids).logits
        torch.testing.assert_close(ours.logits(ids), expected, **TOL)
    save_hf_pretrained(ours, tmp_path / "back")
    config = json.loads((tmp_path / "back" / "config.json").read_text())
    assert config["tie_word_embeddings"] is tied and config["architectures"] == ["LlamaForCausalLM"]
    back, info = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "back",
                                                               output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with torch.no_grad():
        torch.testing.assert_close(back.eval()(ids).logits, expected, **TOL)


@needs_hf
def test_transformers_4_config_spelling_and_bare_model(tmp_path):
    """Hub folders written by transformers 4: rope_theta + rope_scaling ("type"), inv_freq
    buffers; and the bare LlamaModel both ways."""
    hf = hf_llama(True, SCALING)
    state = {k: v.clone() for k, v in hf.state_dict().items()}
    state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    config = dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=101,
                  hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, rms_norm_eps=1e-5,
                  rope_theta=500000.0, tie_word_embeddings=True,
                  rope_scaling={k if k != "rope_type" else "type": v for k, v in SCALING.items()})
    cfg, converted = load_hf_pretrained(_folder(tmp_path / "v4", config, state))
    assert cfg["rope_scaling"] == SCALING and cfg["max_position_embeddings"] == 2048
    model = MODELS.build(cfg)
    model.load_state_dict(converted, strict=True)
    ids = torch.randint(0, 101, (1, 30))
    with torch.no_grad():
        torch.testing.assert_close(model.eval().logits(ids), hf(ids).logits, **TOL)
    bare = from_hf_pretrained(_folder(tmp_path / "bare", dict(config, architectures=["LlamaModel"]),
                                      {k.removeprefix("model."): v for k, v in state.items()}))
    assert type(bare).__name__ == "LlamaModel"
    save_hf_pretrained(bare, tmp_path / "bare_back")
    back = transformers.LlamaModel.from_pretrained(tmp_path / "bare_back").eval()
    with torch.no_grad():
        torch.testing.assert_close(bare.eval()(ids), back(ids).last_hidden_state, **TOL)
    state["lm_head.weight"] = state["model.embed_tokens.weight"] + 1  # untied, but said tied
    with pytest.raises(CheckpointError, match="lm_head.weight differs from the word embeddings"):
        load_hf_pretrained(_folder(tmp_path / "bad", config, state))
    with pytest.raises(CheckpointError, match="rope_type='yarn'"):
        load_hf_pretrained(_folder(tmp_path / "yarn", dict(config, rope_scaling=dict(
            type="yarn", factor=2.0)), state))


def _folder(path, config, state):
    import safetensors.torch

    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    safetensors.torch.save_file({k: v.contiguous() for k, v in state.items()},
                                str(path / "model.safetensors"))
    return path


@needs_hf
def test_greedy_generation_equals_transformers_token_for_token(tmp_path):
    hf = hf_llama(tied=False, scaling=SCALING, seed=1)
    with torch.no_grad():  # sharper logits: a long run of distinct tokens
        for p in hf.parameters():
            p.mul_(2.0)
    hf.save_pretrained(tmp_path)
    ours = from_hf_pretrained(tmp_path).eval()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 101, (3, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :3] = mask[2, :1] = 0  # prompts of 7, 4 and 6 tokens, padded on the left
    ids = ids.masked_fill(mask == 0, 0)
    for kwargs in (dict(input_ids=ids[:1]), dict(input_ids=ids, attention_mask=mask)):
        expected = hf.generate(**kwargs, max_new_tokens=24, do_sample=False)
        got = ours.generate(kwargs.pop("input_ids"), 24, **kwargs)
        assert torch.equal(got, expected), (got, expected)
        assert len(set(got[0, 7:].tolist())) > 5  # not one token repeated


@needs_hf
def test_parameter_counts_equal_transformers_on_meta():
    dims = dict(vocab_size=128256, num_attention_heads=32, num_key_value_heads=8)
    with torch.device("meta"):
        ours_1b = MODELS.build(dict(type="LlamaForCausalLM"))  # the defaults: Llama 3.2 1B
        hf_1b = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            tie_word_embeddings=True, **dims))
        ours_8b = MODELS.build(dict(type="LlamaForCausalLM", hidden_size=4096, num_layers=32,
                                    ffn_hidden_size=14336, tie_word_embeddings=False))
        hf_8b = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            tie_word_embeddings=False, **dims))
    assert n_params(ours_1b) == n_params(hf_1b) == 1_235_814_400
    assert n_params(ours_8b) == n_params(hf_8b) == 8_030_261_248


@needs_hf
def test_load_from_folder_and_other_dims_refused(tmp_path, test_device):
    from libai.runner import Runner

    hf = hf_llama(tied=False)
    hf.save_pretrained(tmp_path / "hf")
    model_cfg = dict(type="LlamaForCausalLM", **(TINY | dict(tie_word_embeddings=False)))
    runner = Runner.from_cfg(dict(model=model_cfg, work_dir=str(tmp_path / "work"),
                                  log_level="WARNING", load_from=dict(path=str(tmp_path / "hf"))))
    runner.checkpointer.restore(weights_only=True)
    ids = torch.randint(0, 101, (2, 9))
    # transformers on the CPU (the reference), the runner's model on its device: float32
    # without TF32 on CUDA sums in another order than the CPU, hence 1e-4 there (TOL on the CPU)
    tol = TOL if test_device.type == "cpu" else dict(atol=1e-4, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(runner.unwrapped_model.eval().logits(ids.to(test_device)),
                                   hf(ids).logits.to(test_device), **tol)
    other = LlamaForCausalLM(**(TINY | dict(num_kv_heads=4, tie_word_embeddings=False)))
    with pytest.raises(CheckpointError) as e:
        hf_state_dict_for(other, tmp_path / "hf")
    assert "set model.num_kv_heads=2 in the config" in str(e.value) and "\n" not in str(e.value)


@needs_hf
def test_transformer_step_benchmark_pairs_the_same_llama(load_script):
    bench = load_script(os.path.join(ROOT, "benchmarks", "transformer_step.py"), "transformer_step")
    assert bench.llama_ffn(768) == 2048 and bench.llama_ffn(64) == 256  # Llama's rounding
    pair = bench.llama_pair(layers=1, hidden=64, heads=4, batch=2, seq=16, vocab=500)
    assert pair.ours.config.num_kv_heads == 1 and not pair.ours.config.tie_word_embeddings
    ours, hf = bench.eval_losses(pair)
    assert abs(ours - hf) < 1e-5
    ours_t, hf_t = bench.compare(pair, rounds=1, steps=1, warmup=1, autocast=_no_autocast,
                                 sync=lambda: None)
    assert len(ours_t) == len(hf_t) == 1


def _no_autocast():
    import contextlib

    return contextlib.nullcontext()


# ----------------------------------------------------------------------------- parallel
class _Mesh:
    def __init__(self, size):
        self._size = size

    def size(self):
        return self._size


def test_tensor_parallel_plan_and_head_count_refusal():
    from libai.parallel import apply_tensor_parallel

    model = LlamaForCausalLM(**(TINY | dict(tie_word_embeddings=False)))
    block = model.transformer.blocks[0]
    assert block.tp_plan == {
        "attn.q_proj": "colwise", "attn.k_proj": "colwise", "attn.v_proj": "colwise",
        "attn.out_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise",
        "mlp.down_proj": "rowwise"}
    assert model.transformer.tp_plan == {"embed_tokens": "vocab"}
    assert model.tp_plan == {"lm_head": "colwise"}  # untied: split by vocabulary
    assert not hasattr(LlamaForCausalLM(**TINY), "tp_plan")  # tied: the embedding's split
    for size, path, count in ((4, "model.num_kv_heads", 2), (3, "model.num_heads", 4)):
        with pytest.raises(ConfigError) as e:  # refused before anything is split
            apply_tensor_parallel(model, _Mesh(size))
        message = str(e.value)
        assert f"parallel.tensor={size} does not divide {path}={count}" in message, message
        assert "choose parallel.tensor among [1, 2]" in message and "\n" not in message


def test_tensor_parallel_equals_one_process(spawn_ranks):
    # the math on 2 forked ranks; torchrun's own path: tests/parallel/test_pipeline.py
    diff = spawn_ranks(2, _worker, timeout=300).check().ranks[0].value
    for case in ("tp tied", "tp untied", "tp+rank0_init untied", "fsdp untied"):
        assert diff[case] < 1e-5, diff
    assert diff["kv split"] == "(Shard(dim=0),)torch.Size([16, 64])", diff  # 1 of 2 KV heads


def _worker():
    """A rank of 2 (gloo): tensor parallel (and FSDP) train a tiny Llama for 3 AdamW steps;
    returns the largest weight difference from one process on the same batches."""
    import contextlib

    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.tensor.parallel import loss_parallel

    from libai.parallel import ParallelConfig, build_mesh, build_on_rank0, parallelize

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, 101, (4, 17), generator=g) for _ in range(3)]

    def build(tied):
        torch.manual_seed(0)
        return LlamaForCausalLM(**(TINY | dict(tie_word_embeddings=tied)))

    def train(model, tensor_parallel, share=lambda t: t):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for ids in data:
            ids = share(ids)
            with loss_parallel() if tensor_parallel else contextlib.nullcontext():
                model(dict(input_ids=ids[:, :-1], labels=ids[:, 1:]))["loss"].backward()
            opt.step()
            opt.zero_grad()
        full = StateDictOptions(full_state_dict=True)
        return get_model_state_dict(model, options=full)

    result = {}
    for name, sizes, tied in (("tp tied", dict(tensor=world), True),
                              ("tp untied", dict(tensor=world), False),
                              ("tp+rank0_init untied", dict(tensor=world, rank0_init=True), False),
                              ("fsdp untied", dict(fsdp=world), False)):
        reference = train(build(tied), False)
        pc = ParallelConfig(world_size=world, data=1, **sizes)
        model, _ = parallelize(build_on_rank0(lambda t=tied: build(t), pc), pc,
                               build_mesh(pc, "cpu"), torch.device("cpu"))
        if pc.tensor > 1:
            w = model.transformer.blocks[0].attn.k_proj.weight
            result["kv split"] = str(w.placements) + str(w.to_local().shape)
        share = (lambda t: t.chunk(world)[rank]) if pc.fsdp > 1 else (lambda t: t)
        state = train(model, pc.tensor > 1, share)
        result[name] = max((state[k] - reference[k]).abs().max().item() for k in reference)
    dist.destroy_process_group()
    return result


# ----------------------------------------------------------------------------- shipped configs
def _config(name):  # read, not trained: shipped_config is for a test that trains one
    from libai.config import Config

    return Config.fromfile(os.path.join(ROOT, "configs", f"{name}.py"))


def test_llama_tiny_is_gpt2_tiny_with_llama_blocks():
    tiny, gpt = _config("llama_tiny"), _config("gpt2_tiny")
    for key in ("train_dataloader", "val_dataloader", "test_dataloader", "train_cfg",
                "param_scheduler", "optim_wrapper"):
        assert tiny[key] == gpt[key], key
    m = tiny.model
    assert (m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads) == (128, 4, 4, 2)
    assert m.vocab_size == tiny.train_dataloader.dataset.corpus.tokenizer.vocab_size == 8192
    assert tiny.train_dataloader.dataset.seq_length <= m.max_position_embeddings
    with torch.device("meta"):
        llama, gpt2 = MODELS.build(m.to_dict()), MODELS.build(gpt.model.to_dict())
    mlp = lambda model: n_params(model.transformer.blocks[0].mlp)  # noqa: E731
    assert abs(mlp(llama) - mlp(gpt2)) / mlp(gpt2) < 0.01  # SwiGLU 344 wide ~ GPT-2's 4H MLP
    assert 0.9 < n_params(llama) / n_params(gpt2) < 1.0  # no learned positions, 2 KV heads


def test_llama3_1b_config_has_the_real_dimensions():
    cfg = _config("llama3_1b")
    with torch.device("meta"):
        model = MODELS.build(cfg.model.to_dict())
    assert n_params(model) == 1_235_814_400 and model.max_position_embeddings == 131072
    assert cfg.train_dataloader.dataset.corpus.tokenizer.vocab_size == model.vocab_size
    fit = batch_fit.resolve(cfg, torch.device("cpu"), 1)  # batch_size='auto', on this CPU
    assert fit.micro * fit.accumulation == 64


def test_llama_tiny_loss_falls(tmp_path, shipped_config):
    from libai.runner import Runner

    cfg = shipped_config("llama_tiny", "train_cfg.max_iters=20", "train_dataloader.batch_size=4")
    cfg.work_dir = str(tmp_path)
    cfg.val_dataloader = None  # training only
    cfg.default_hooks = dict(logger=dict(interval=1, progress_bar=False, plot=False),
                             checkpoint=None)
    runner = Runner.from_cfg(cfg)
    runner.train()
    rows = [json.loads(line) for line in next(tmp_path.glob("*/scalars.jsonl")).open()]
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert len(losses) == 20 and abs(losses[0] - 9.01) < 0.3  # ln 8192 = 9.01 at the start
    assert sum(losses[-3:]) / 3 < losses[0] - 0.8, losses  # ~7.7 after 20 steps


def test_llama3_1b_fast_dev_run_on_cpu_shrunk(tmp_path, run_tool, shipped_config):
    # the real widths and vocabulary, 2 of the 16 layers, blocks of 64 tokens: one step of one
    # block, one validation batch (~6 GB; the 128,256-token BPE vocabulary is trained on first
    # use), through tools/train.py in this process (shipped_config: it trains a shipped config)
    seq = [f"{s}_dataloader.dataset.seq_length=64" for s in ("train", "val", "test")]
    out = run_tool("tools/train.py", os.path.join(ROOT, "configs", "llama3_1b.py"), "--work-dir",
                   tmp_path, "--fast-dev-run", "1", "--cfg-options", "model.num_layers=2", *seq)
    log = out.output
    assert out.returncode == 0, log[-3000:]
    assert "Iter [1/1]" in log and "val/perplexity" in log and "384,313,344" in log
    assert not any(name.endswith(".pth") for name in os.listdir(tmp_path))


def test_gpt2_and_bert_blocks_refuse_a_size_that_does_not_divide_their_heads():
    from libai.parallel import apply_tensor_parallel
    from libai.registry import MODELS

    for kind in ("GPTForCausalLM", "BertForPreTraining"):
        model = MODELS.build(dict(type=kind, vocab_size=64, hidden_size=48, num_layers=1,
                                  num_heads=6, ffn_hidden_size=96))
        with pytest.raises(ConfigError) as e:
            apply_tensor_parallel(model, _Mesh(4))
        assert str(e.value).startswith("parallel.tensor=4 does not divide model.num_heads=6")
        assert "choose parallel.tensor among [1, 2, 3, 6]" in str(e.value)
