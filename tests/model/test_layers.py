"""Transformer building blocks: attention (masks, causal, KV cache), MLP, embeddings, block, init."""

import math

import pytest
import torch
from torch import nn

from libai.model.layers import (
    MLP,
    KVCache,
    SelfAttention,
    TransformerBlock,
    TransformerEmbeddings,
    get_activation,
    init_transformer_weights,
    key_padding_mask,
    scale_residual_projections,
)
from libai.utils.errors import ConfigError, DataError


def reference_attention(attn, x, keep=None):
    """softmax(QK^T / sqrt(d)) V written out, to check the SDPA path against."""
    B, S, H = x.shape
    q, k, v = (p(x).view(B, S, attn.num_heads, -1).transpose(1, 2)
               for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    scores = q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim)  # (B, nh, S, S)
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, H)
    return attn.out_proj(y)


@pytest.fixture
def attn():
    torch.manual_seed(0)
    return SelfAttention(32, 4, attention_dropout=0.5, hidden_dropout=0.5).eval()


def test_attention_matches_reference_with_padding_and_causal(attn):
    x = torch.randn(2, 7, 32)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 4:] = 0
    keep = key_padding_mask(mask)
    assert keep.shape == (2, 1, 1, 7) and keep.dtype == torch.bool
    torch.testing.assert_close(attn(x, keep), reference_attention(attn, x, keep))
    torch.testing.assert_close(attn(x, key_padding_mask(keep)), attn(x, keep))  # 4-D passes
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    torch.testing.assert_close(attn(x, is_causal=True), reference_attention(attn, x, causal))
    assert key_padding_mask(None) is None


def test_padding_keys_do_not_change_real_positions(attn):
    x = torch.randn(1, 6, 32)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    y = x.clone()
    y[:, 4:] = torch.randn(1, 2, 32)  # other content at the padded positions
    out_x, out_y = attn(x, key_padding_mask(mask)), attn(y, key_padding_mask(mask))
    torch.testing.assert_close(out_x[:, :4], out_y[:, :4])


def test_dropout_only_in_training(attn):
    x = torch.randn(2, 5, 32)
    assert torch.equal(attn(x), attn(x))  # eval: deterministic
    attn.train()
    assert not torch.equal(attn(x), attn(x))


def test_kv_cache_prefill_then_one_token_and_chunk_equal_full_causal(attn):
    x = torch.randn(2, 9, 32)
    full = attn(x, is_causal=True)
    cache = KVCache(2, 4, 8, max_length=16)
    parts = [attn(x[:, :5], is_causal=True, kv_cache=cache)]  # prefill
    parts.append(attn(x[:, 5:6], is_causal=True, kv_cache=cache))  # one token sees all cached
    parts.append(attn(x[:, 6:9], is_causal=True, kv_cache=cache))  # a chunk: causal offset mask
    assert cache.length == 9
    torch.testing.assert_close(torch.cat(parts, dim=1), full)
    with pytest.raises(ValueError, match="holds 16 positions"):
        attn(torch.randn(2, 8, 32), kv_cache=cache)


def test_heads_must_divide_hidden_size_one_line():
    with pytest.raises(ConfigError) as exc:
        SelfAttention(30, 4)
    msg = str(exc.value)
    assert "\n" not in msg and "hidden_size 30" in msg and "num_heads 4" in msg
    assert "e.g. 3" in msg or "e.g. 5" in msg


def test_mlp_activations_by_name():
    torch.manual_seed(0)
    x = torch.randn(4, 8) * 3
    exact, tanh, relu = (get_activation(n)(x) for n in ("gelu", "gelu_tanh", "relu"))
    torch.testing.assert_close(exact, 0.5 * x * (1 + torch.erf(x / math.sqrt(2))))
    approx = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    torch.testing.assert_close(tanh, approx)
    assert not torch.equal(exact, tanh) and torch.equal(relu, x.clamp(min=0))
    mlp = MLP(8, 16, "relu", dropout=0.0)
    assert mlp(x).shape == (4, 8)
    with pytest.raises(ConfigError) as exc:
        MLP(8, 16, "gelu_tahn")
    assert "Did you mean 'gelu_tanh'" in str(exc.value) and "\n" not in str(exc.value)


def test_embeddings_token_types_and_too_long():
    torch.manual_seed(0)
    emb = TransformerEmbeddings(50, 16, 8, type_vocab_size=2, layer_norm_eps=1e-12,
                                padding_idx=0).eval()
    ids = torch.randint(0, 50, (2, 6))
    torch.testing.assert_close(emb(ids), emb(ids, torch.zeros_like(ids)))
    assert not torch.equal(emb(ids), emb(ids, torch.ones_like(ids)))
    h = emb(ids)
    torch.testing.assert_close(h.mean(-1), torch.zeros(2, 6), atol=1e-5, rtol=0)  # LayerNorm
    with pytest.raises(DataError) as exc:
        emb(torch.zeros(1, 9, dtype=torch.long))
    assert str(exc.value) == (
        "sequence length 9 > max_position_embeddings 8: shorten the data's max_seq_length or "
        "raise model.max_position_embeddings")
    with pytest.raises(DataError, match="sequence length 9 > max"):  # positions after a cache
        emb(torch.zeros(1, 2, dtype=torch.long), start_pos=7)
    plain = TransformerEmbeddings(50, 16, 8)  # GPT-2: no token types, no LayerNorm
    assert plain.token_type_embeddings is None and plain.norm is None


@pytest.mark.parametrize("pre_norm", [False, True])
def test_block_post_and_pre_norm(pre_norm):
    torch.manual_seed(0)
    block = TransformerBlock(32, 4, 64, activation="gelu", layer_norm_eps=1e-5,
                             pre_norm=pre_norm).eval()
    x = torch.randn(2, 5, 32) * 4 + 3
    y = block(x)
    assert y.shape == x.shape
    normalised = torch.allclose(y.mean(-1), torch.zeros(2, 5), atol=1e-4)
    assert normalised is not pre_norm  # post-LN ends on a LayerNorm; pre-LN on the residual
    causal = block(x, is_causal=True)
    torch.testing.assert_close(causal[:, :1], block(x[:, :1]))  # the first sees itself only


def test_init_helpers_statistics():
    torch.manual_seed(0)
    model = nn.ModuleList([TransformerBlock(256, 4, 1024) for _ in range(4)])
    model.append(nn.Embedding(1000, 256, padding_idx=3))
    init_transformer_weights(model, std=0.02)
    block = model[0]
    assert block.mlp.fc1.weight.std().item() == pytest.approx(0.02, rel=0.02)
    assert model[4].weight.std().item() == pytest.approx(0.02, rel=0.02)
    assert torch.all(model[4].weight[3] == 0)
    assert torch.all(block.attn.q_proj.bias == 0) and torch.all(block.mlp.fc2.bias == 0)
    assert torch.all(block.attn_norm.weight == 1) and torch.all(block.attn_norm.bias == 0)
    scale_residual_projections(model[:4], std=0.02, num_layers=4)
    scaled = 0.02 / math.sqrt(8)
    assert block.attn.out_proj.weight.std().item() == pytest.approx(scaled, rel=0.03)
    assert block.mlp.fc2.weight.std().item() == pytest.approx(scaled, rel=0.03)
    assert block.attn.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.03)
