# GPT-2 small (Radford et al., 2019): 12 layers, hidden 768, 12 heads, blocks of 1024 tokens,
# 124 M parameters at the 50,257-token vocabulary. Batch: 512 blocks, about 0.5 M tokens, as
# nanoGPT: 8 blocks per step x 64 accumulated steps on a GPU; 2 x 256 on a CPU, where attention
# dropout makes torch keep every 1024 x 1024 attention matrix for the backward (with N processes
# divide optim_wrapper.accumulative_counts by N). Schedule: AdamW lr 6e-4, warm-up 2,000,
# cosine to 6e-5 at 600,000 steps. bfloat16 autocast on a GPU, float32 on a CPU.
# Data: the built-in Shakespeare with a byte-level BPE vocabulary of 50,257 tokens (the corpus
# yields fewer merges; unused tokens fill the rest, see docs/text.md).
import torch

_base_ = [
    "_base_/models/gpt2.py",
    "_base_/datasets/shakespeare_gpt.py",
    "_base_/schedules/gpt_adamw_cosine.py",
    "_base_/default_runtime.py",
]
_gpu = torch.cuda.is_available()
_micro = 8 if _gpu else 2
_data = dict(batch_size=_micro)
train_dataloader = _data
val_dataloader = _data
test_dataloader = _data
optim_wrapper = dict(accumulative_counts=512 // _micro)
if _gpu:
    optim_wrapper = dict(type="AmpOptimWrapper", dtype="bfloat16", accumulative_counts=512 // _micro)
default_hooks = dict(checkpoint=dict(interval=2000))
work_dir = "work_dirs/gpt2_small"
