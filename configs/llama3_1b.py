# Llama 3.2 1B (Meta, 2024) at its real dimensions (configs/_base_/models/llama.py): 16 layers,
# hidden 2048, 32 query heads over 8 key/value heads, SwiGLU 8192, RoPE base 500,000 with Llama
# 3's scaling, tied embeddings; 1,235,814,400 parameters at the 128,256-token vocabulary, the
# count of Hugging Face's meta-llama/Llama-3.2-1B (whose weights load: load_from=dict(path=FOLDER)).
# Blocks of 2,048 tokens (the model takes 131,072). Batch: 64 blocks, about 131 k tokens, per
# optimizer step over all processes; the micro-batch is chosen from the device (micro_batch
# below, libai/runner/batch_fit.py) and the accumulation keeps the 64. The table is an estimate,
# not yet measured: ~20 GB of fp32 weights, gradients and AdamW state in one process, and per
# block ~3 GB of bf16 activations (16 layers x 2,048 tokens) plus ~2.6 GB for the logits over
# 128,256 tokens; a row asks for 30% more: 1 below 44 GB, 2 from 44, 4 from 60 (an 80 GB H100,
# the 4 shipped before), 8 from 91. Under FSDP each process holds 1/N of the state: the table
# stays on the safe side. 1 x 64 on a CPU. train_dataloader.batch_size=N wins.
# Schedule: AdamW lr 3e-4, betas (0.9, 0.95), weight decay 0.1, clipping at 1.0, warm-up 2,000
# steps (at most 10% of the run), cosine to 3e-5. On a GPU: bfloat16 autocast, and FSDP over every process of a torchrun launch
# (parameters, gradients and AdamW state sharded: 1.2 B parameters are ~20 GB of them in fp32).
# Data: the built-in Shakespeare with a byte-level BPE vocabulary of 128,256 tokens (the corpus
# yields fewer merges; unused tokens fill the rest, see docs/text.md).
#
#   torchrun --nproc_per_node 8 tools/train.py configs/llama3_1b.py
#   python tools/train.py configs/llama3_1b.py --fast-dev-run --cfg-options model.num_layers=2 \
#       train_dataloader.dataset.seq_length=256 val_dataloader.dataset.seq_length=256  # a CPU
import os

import torch

_base_ = [
    "_base_/models/llama.py",
    "_base_/datasets/shakespeare_gpt.py",
    "_base_/schedules/gpt_adamw_cosine.py",
    "_base_/default_runtime.py",
]
_gpu = torch.cuda.is_available()
_seq = 2048
micro_batch = dict(global_batch=64, table=[(0, 1), (44, 2), (60, 4), (91, 8)], cpu=1)
_data = dict(dataset=dict(corpus=dict(tokenizer=dict(vocab_size=128256)), seq_length=_seq),
             batch_size=4 if _gpu else 1)
train_dataloader = dict(_data, batch_size="auto")
val_dataloader = _data
test_dataloader = _data

optim_wrapper = dict(optimizer=dict(lr=3e-4), accumulative_counts="auto")
param_scheduler = [
    dict(type="LinearLR", start_factor=1e-3, begin=0, end=dict(iters=2000, at_most=0.1)),
    dict(type="CosineAnnealingLR", eta_min=3e-5, begin=dict(iters=2000, at_most=0.1), end=-1),
]
if _gpu:
    optim_wrapper = dict(type="AmpOptimWrapper", dtype="bfloat16", optimizer=dict(lr=3e-4),
                         accumulative_counts="auto")
    parallel = dict(fsdp=int(os.environ.get("WORLD_SIZE", "1")))  # every process of the launch
train_cfg = dict(max_iters=100_000, val_interval=2000)
default_hooks = dict(checkpoint=dict(interval=2000))
work_dir = "work_dirs/llama3_1b"
