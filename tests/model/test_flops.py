"""libai/model/flops.py: attention FLOPs with fewer key/value heads (grouped-query attention),
counted through FlopCounterMode and compared with the formula written out by hand. CPU: the real
SDPA runs the CPU kernel; the GPU kernels' formulas are reached with meta tensors (shapes only)."""

import pytest
import torch
import torch.nn.functional as F

from libai.model.flops import flop_counter

B, HQ, HKV, S, D = 2, 8, 2, 16, 32  # 4 query heads per key/value head


def _by_hand(b, hq, sq, sk, d):
    # forward: q @ k^T and scores @ v, one multiply-add (2 FLOPs) each, per query head
    forward = 2 * b * hq * sq * sk * d + 2 * b * hq * sq * sk * d
    # backward: scores again, dScores = dOut @ v^T, dV = P^T @ dOut, dQ = dS @ k, dK = dS^T @ q
    backward = 5 * (2 * b * hq * sq * sk * d)
    return forward, backward


def test_gqa_sdpa_on_the_cpu_counts_every_query_head():
    # device="cpu": the claim is about the CPU's SDPA kernel, which torch has no formula for
    q = torch.randn(B, HQ, S, D, requires_grad=True)
    k, v = (torch.randn(B, HKV, S, D, requires_grad=True) for _ in range(2))
    counter = flop_counter()
    with counter:
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()
    forward, backward = _by_hand(B, HQ, S, S, D)
    assert counter.failure is None
    assert counter.get_total_flops() == forward + backward
    # the same work as repeating the key/value heads first
    k2, v2 = (t.detach().repeat_interleave(HQ // HKV, dim=1).requires_grad_() for t in (k, v))
    expanded = flop_counter()
    with expanded:
        F.scaled_dot_product_attention(q, k2, v2, is_causal=True).sum().backward()
    assert expanded.get_total_flops() == counter.get_total_flops()


@pytest.mark.parametrize("kernel", ["_scaled_dot_product_flash_attention",
                                    "_scaled_dot_product_efficient_attention",
                                    "_scaled_dot_product_cudnn_attention"])
def test_gqa_shapes_on_the_gpu_kernels_formulas(kernel):
    # torch 2.11's formulas for these kernels asserted on fewer key/value heads (issue 35)
    if not hasattr(torch.ops.aten, kernel):
        pytest.skip(f"this torch has no aten.{kernel}")
    q = torch.empty(B, HQ, S, D, device="meta")
    k, v = (torch.empty(B, HKV, S, D, device="meta") for _ in range(2))
    args = (q, k, v) if kernel.endswith("flash_attention") else (q, k, v, None, False)
    counter = flop_counter()
    with counter:
        getattr(torch.ops.aten, kernel)(*args)
    assert counter.failure is None
    assert counter.get_total_flops() == _by_hand(B, HQ, S, S, D)[0]


def test_llama_attention_is_counted():
    # device="cpu": Llama's GQA layer calls SDPA with enable_gqa=True
    from libai.model.zoo.llama import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2,
                      ffn_hidden_size=64, max_position_embeddings=32)
    model = LlamaForCausalLM(cfg)
    ids = torch.randint(0, 64, (2, 8))
    counter = flop_counter()
    with counter:
        out = model({"input_ids": ids, "labels": ids})
        (out["loss"] if isinstance(out, dict) else out).backward()
    counts = counter.get_flop_counts()["Global"]
    attention = {str(op): n for op, n in counts.items() if "attention" in str(op)}
    assert counter.failure is None
    forward, backward = _by_hand(2, 4, 8, 8, 32 // 4)
    assert sum(attention.values()) == forward + backward, attention
