"""libai's BERT, GPT-2 and Llama against Hugging Face transformers: one training step, same weights.

Pairs: libai ``BertForPreTraining`` vs ``transformers.BertForPreTraining``, libai
``GPTForCausalLM`` vs ``transformers.GPT2LMHeadModel``, libai ``LlamaForCausalLM`` vs
``transformers.LlamaForCausalLM``. The Hugging Face model is built first (its own init: N(0,
0.02), GPT-2's scaled residual projections) and its weights are converted into the libai model,
so both start identical; their eval losses on the batch are printed to show it.
Both then train on the same batch in train mode (dropout on): forward, backward, AdamW step.

- BERT: libai gets the original ``max_predictions_per_seq`` format (``mlm_positions`` +
  ``mlm_labels``, (B, P)), so its MLM head projects B*P positions to the vocabulary; Hugging Face
  gets the same targets as (B, S) labels with -100 elsewhere (its only format), and projects all
  B*S. Both compute NSP.
- GPT-2 and Llama: libai gets labels already shifted (``labels[t] = input_ids[t + 1]``, -100 at
  the end); Hugging Face gets ``labels=input_ids`` and shifts inside. The same S - 1 tokens are
  predicted.
- Llama: the width and heads of the others, a quarter as many key/value heads (grouped-query
  attention), SwiGLU 8H/3 wide rounded up to a multiple of 256 (Llama's rule; 2048 at hidden
  768), RoPE, an untied LM head, Llama 2's 32,000-token vocabulary (``--llama-vocab``).

Timing (these machines are noisy): ``--rounds`` rounds, each running ``--steps`` steps of one
model then of the other, the order alternating by round; the ratio libai/HF of each round, and the
median over rounds. Tokens/s use the median step time. CPU runs use ``torch.set_num_threads
(--threads)`` (default 1).

With CUDA available the same pairs also run on the GPU under bf16 autocast (sizes from the
``--gpu-*`` flags), printing tokens/s and model TFLOP/s against the GPU's dense bf16 peak. The
FLOPs are those of the libai step (forward + backward, counted once with
``torch.utils.flop_counter.FlopCounterMode``) and are used for both models: they are the useful
work (Hugging Face BERT also projects the unmasked positions to the vocabulary).

    python benchmarks/transformer_step.py [--models bert gpt llama] [--layers 4] [--hidden 768]
        [--heads 12] [--seq 128] [--batch 2] [--predictions 20] [--rounds 7] [--steps 1]
        [--threads 1] [--no-cpu] [--gpu-layers 12] [--gpu-batch 32] [--gpu-seq 512]
        [--gpu-steps 10] [--bf16-on-cpu]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from libai.model.zoo.hf import hf_to_libai
from libai.registry import MODELS

# dense bf16 peak FLOP/s by device name (the first match wins)
BF16_PEAK = {"H100 PCIe": 756e12, "H100": 989e12, "H200": 989e12, "A100": 312e12}


@dataclass
class Pair:
    """A libai model and its Hugging Face twin, each with its batch and loss."""

    name: str
    ours: torch.nn.Module
    hf: torch.nn.Module
    ours_batch: dict[str, torch.Tensor]
    hf_batch: dict[str, torch.Tensor]
    tokens: int  # tokens per step

    def ours_loss(self) -> torch.Tensor:
        return sum(v for k, v in self.ours(self.ours_batch).items() if "loss" in k)

    def hf_loss(self) -> torch.Tensor:
        return self.hf(**self.hf_batch).loss


def bert_pair(layers: int, hidden: int, heads: int, batch: int, seq: int, predictions: int,
              vocab: int) -> Pair:
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                                  num_attention_heads=heads, intermediate_size=4 * hidden,
                                  max_position_embeddings=max(512, seq))
    hf = transformers.BertForPreTraining(cfg)
    ids = torch.randint(1, vocab, (batch, seq))
    types = torch.zeros_like(ids)
    types[:, seq // 2:] = 1
    mask = torch.ones_like(ids)
    positions = torch.stack([torch.randperm(seq)[:predictions].sort().values for _ in range(batch)])
    targets = torch.randint(1, vocab, (batch, predictions))
    dense = torch.full((batch, seq), -100).scatter_(1, positions, targets)  # (B, S)
    nsp = torch.randint(0, 2, (batch,))
    common = dict(input_ids=ids, attention_mask=mask, token_type_ids=types, next_sentence_label=nsp)
    return Pair("BERT", _libai_twin(hf), hf, common | dict(mlm_positions=positions, mlm_labels=targets),
                common | dict(labels=dense), batch * seq)


def gpt_pair(layers: int, hidden: int, heads: int, batch: int, seq: int, vocab: int) -> Pair:
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads,
                                  n_positions=max(1024, seq), bos_token_id=vocab - 1,
                                  eos_token_id=vocab - 1)
    hf = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, vocab, (batch, seq))
    labels = torch.cat([ids[:, 1:], torch.full((batch, 1), -100)], dim=1)  # (B, S) shifted
    return Pair("GPT-2", _libai_twin(hf), hf, dict(input_ids=ids, labels=labels),
                dict(input_ids=ids, labels=ids), batch * seq)


def llama_ffn(hidden: int) -> int:
    """Llama's SwiGLU width: 8H/3 rounded up to a multiple of 256."""
    return -(-8 * hidden // 3 // 256) * 256


def llama_pair(layers: int, hidden: int, heads: int, batch: int, seq: int, vocab: int) -> Pair:
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=llama_ffn(hidden),
        num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 4), max_position_embeddings=max(2048, seq),
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
    hf = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(0, vocab, (batch, seq))
    labels = torch.cat([ids[:, 1:], torch.full((batch, 1), -100)], dim=1)  # (B, S) shifted
    return Pair("Llama", _libai_twin(hf), hf, dict(input_ids=ids, labels=labels),
                dict(input_ids=ids, labels=ids), batch * seq)


def _libai_twin(hf: torch.nn.Module) -> torch.nn.Module:
    """The libai model with the Hugging Face model's weights (converted in memory)."""
    cfg, state = hf_to_libai(hf.config.to_dict(), hf.state_dict())
    ours = MODELS.build(cfg)
    ours.load_state_dict(state, strict=True)
    return ours


def to_device(pair: Pair, device: str) -> Pair:
    pair.ours.to(device)
    pair.hf.to(device)
    pair.ours_batch = {k: v.to(device) for k, v in pair.ours_batch.items()}
    pair.hf_batch = {k: v.to(device) for k, v in pair.hf_batch.items()}
    return pair


def stepper(model: torch.nn.Module, loss_fn: Callable[[], torch.Tensor], autocast: Any,
            sync: Callable[[], None]) -> Callable[[int], float]:
    """A function that runs n training steps and returns seconds per step."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()

    def run(n: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(n):
            with autocast():
                loss = loss_fn()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        sync()
        return (time.perf_counter() - start) / n

    return run


def compare(pair: Pair, rounds: int, steps: int, warmup: int, autocast: Any,
            sync: Callable[[], None]) -> tuple[list[float], list[float]]:
    """Seconds per step of libai and of HF, one entry per round, interleaved."""
    runs = {"ours": stepper(pair.ours, pair.ours_loss, autocast, sync),
            "hf": stepper(pair.hf, pair.hf_loss, autocast, sync)}
    for run in runs.values():
        run(warmup)
    times: dict[str, list[float]] = {"ours": [], "hf": []}
    for r in range(rounds):
        for which in ("ours", "hf") if r % 2 == 0 else ("hf", "ours"):
            times[which].append(runs[which](steps))
    return times["ours"], times["hf"]


def eval_losses(pair: Pair) -> tuple[float, float]:
    pair.ours.eval()
    pair.hf.eval()
    with torch.no_grad():
        return pair.ours(pair.ours_batch)["loss"].item(), pair.hf_loss().item()


def report(pair: Pair, ours_t: list[float], hf_t: list[float], flops: float | None = None,
           peak: float | None = None) -> float:
    ratios = sorted(o / h for o, h in zip(ours_t, hf_t))
    ratio = statistics.median(ratios)
    for who, t in (("libai", statistics.median(ours_t)), ("HF", statistics.median(hf_t))):
        line = f"  {who:<6}{t * 1e3:9.1f} ms/step {pair.tokens / t:10.0f} tokens/s"
        if flops:
            line += f" {flops / t / 1e12:8.2f} TFLOP/s"
            if peak:
                line += f" ({100 * flops / t / peak:.1f}% of {peak / 1e12:.0f} bf16 peak)"
        print(line)
    print(f"  ratio libai/HF {ratio:.3f} (median of {len(ratios)} rounds, ranged "
          f"{ratios[0]:.3f}-{ratios[-1]:.3f}); target <= 1.0: {'met' if ratio <= 1.0 else 'NOT met'}")
    return ratio


def build(name: str, args: argparse.Namespace, layers: int, batch: int, seq: int) -> Pair:
    if name == "bert":
        predictions = min(seq, max(1, round(args.predictions * seq / args.seq)))
        return bert_pair(layers, args.hidden, args.heads, batch, seq, predictions, args.bert_vocab)
    if name == "llama":
        return llama_pair(layers, args.hidden, args.heads, batch, seq, args.llama_vocab)
    return gpt_pair(layers, args.hidden, args.heads, batch, seq, args.gpt_vocab)


def describe(pair: Pair, layers: int, args: argparse.Namespace, batch: int, seq: int) -> str:
    c = pair.ours.config
    extra = (f", {pair.ours_batch['mlm_positions'].shape[1]} predictions/seq"
             if pair.name == "BERT" else "")
    kv = f" ({c['num_kv_heads']} key/value)" if c.get("num_kv_heads") else ""
    return (f"{pair.name}: {layers} layers, hidden {args.hidden}, {args.heads} heads{kv}, ffn "
            f"{c.get('ffn_hidden_size') or 4 * args.hidden}, vocab {pair.ours.vocab_size}, "
            f"batch {batch} x seq {seq}{extra}")


def run_cpu(name: str, args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    pair = build(name, args, args.layers, args.batch, args.seq)
    print(describe(pair, args.layers, args, args.batch, args.seq) +
          f"; CPU, {args.threads} thread(s), fp32, forward + backward + AdamW")
    ours_loss, hf_loss = eval_losses(pair)
    print(f"  same weights: eval loss libai {ours_loss:.5f} vs HF {hf_loss:.5f}")
    ours_t, hf_t = compare(pair, args.rounds, args.steps, 1, contextlib.nullcontext, lambda: None)
    report(pair, ours_t, hf_t)


def run_bf16(name: str, args: argparse.Namespace, device: str) -> None:
    cuda = device == "cuda"
    device_name = torch.cuda.get_device_name() if cuda else "CPU"
    peak = next((v for k, v in BF16_PEAK.items() if k in device_name), None)
    pair = to_device(build(name, args, args.gpu_layers, args.gpu_batch, args.gpu_seq), device)
    print(describe(pair, args.gpu_layers, args, args.gpu_batch, args.gpu_seq) +
          f"; {device_name}, bf16 autocast, forward + backward + AdamW")

    def autocast():
        return torch.autocast(device, dtype=torch.bfloat16)

    pair.ours.train()
    with FlopCounterMode(display=False) as counter, autocast():
        pair.ours_loss().backward()
    pair.ours.zero_grad(set_to_none=True)
    flops = counter.get_total_flops()
    print(f"  model FLOPs per step (libai, forward + backward): {flops / 1e9:.1f} GFLOP")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    ours_t, hf_t = compare(pair, args.rounds, args.gpu_steps, 3, autocast, sync)
    report(pair, ours_t, hf_t, flops, peak)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=["bert", "gpt", "llama"],
                        default=["bert", "gpt", "llama"])
    parser.add_argument("--layers", type=int, default=4, help="CPU: transformer blocks")
    parser.add_argument("--hidden", type=int, default=768,
                        help="width; ffn is 4x (Llama: 8/3x, rounded up to 256)")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128, help="CPU: sequence length")
    parser.add_argument("--batch", type=int, default=2, help="CPU: sequences per step")
    parser.add_argument("--predictions", type=int, default=20,
                        help="BERT masked positions per sequence at --seq (scaled for --gpu-seq)")
    parser.add_argument("--bert-vocab", type=int, default=30522)
    parser.add_argument("--gpt-vocab", type=int, default=50257)
    parser.add_argument("--llama-vocab", type=int, default=32000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=1, help="CPU: steps per model per round")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU comparison")
    parser.add_argument("--gpu-layers", type=int, default=12)
    parser.add_argument("--gpu-batch", type=int, default=32)
    parser.add_argument("--gpu-seq", type=int, default=512)
    parser.add_argument("--gpu-steps", type=int, default=10)
    parser.add_argument("--bf16-on-cpu", action="store_true",
                        help="run the GPU measurement (bf16, FLOPs) on the CPU: checks the code "
                             "path on a machine without a GPU (use small --gpu-* sizes)")
    args = parser.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()  # its notes on configs built in code
    for name in args.models:
        if not args.no_cpu:
            run_cpu(name, args)
        if torch.cuda.is_available() or args.bf16_on_cpu:
            run_bf16(name, args, "cuda" if torch.cuda.is_available() else "cpu")


if __name__ == "__main__":
    main()
