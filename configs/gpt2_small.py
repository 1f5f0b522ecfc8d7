# GPT-2 small (Radford et al., 2019): 12 layers, hidden 768, 12 heads, blocks of 1024 tokens,
# 124 M parameters at the 50,257-token vocabulary. Batch: 8 blocks per step x 64 accumulated
# steps = 512 blocks, about 0.5 M tokens, as nanoGPT (with N processes set
# optim_wrapper.accumulative_counts=64/N). Schedule: AdamW lr 6e-4, warm-up 2,000, cosine to
# 6e-5 at 600,000 steps. bfloat16 autocast on a GPU, float32 on a CPU.
# Data: the built-in Shakespeare with a byte-level BPE vocabulary of 50,257 tokens (the corpus
# yields fewer merges; unused tokens fill the rest, see docs/text.md).
import torch

_base_ = [
    "_base_/models/gpt2.py",
    "_base_/datasets/shakespeare_gpt.py",
    "_base_/schedules/gpt_adamw_cosine.py",
    "_base_/default_runtime.py",
]
optim_wrapper = dict(accumulative_counts=64)
if torch.cuda.is_available():
    optim_wrapper = dict(type="AmpOptimWrapper", dtype="bfloat16", accumulative_counts=64)
default_hooks = dict(checkpoint=dict(interval=2000))
work_dir = "work_dirs/gpt2_small"
