# BERT-base (Devlin et al., 2019: 12 layers, hidden 768, 12 heads, ffn 3072, 110 M parameters)
# pretrained with masked LM + next sentence prediction, sequences of 128 tokens, global batch
# 256 = 32 per step x 8 accumulated steps (per process: with N processes set
# optim_wrapper.accumulative_counts=8/N), the paper's AdamW schedule.
# Data: the built-in Shakespeare with a 30,522-token WordPiece vocabulary; for your own corpus
# see docs/text.md. On a GPU it runs in bfloat16 (autocast); on a CPU in float32.
import torch

_base_ = [
    "_base_/models/bert.py",
    "_base_/datasets/shakespeare_bert.py",
    "_base_/schedules/bert_adamw_linear.py",
    "_base_/default_runtime.py",
]
optim_wrapper = dict(accumulative_counts=8)
if torch.cuda.is_available():  # bf16 autocast on GPU; on a CPU bf16 is emulated and ~20x slower
    optim_wrapper = dict(type="AmpOptimWrapper", dtype="bfloat16", accumulative_counts=8)
default_hooks = dict(checkpoint=dict(interval=10000))
work_dir = "work_dirs/bert_base"
