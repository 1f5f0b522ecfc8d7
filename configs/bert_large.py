# BERT-large (Devlin et al., 2019): 24 layers, hidden 1024, 16 heads, ffn 4096, 512 positions,
# 336 M parameters at the 30,522-token vocabulary; masked LM + next sentence prediction on
# sequences of 512 tokens.
#
# Batch: a global batch of 256 sequences on one device: 8 per step x 32 accumulated steps on a
# GPU; 2 x 128 on a CPU, where attention dropout makes torch keep every 512 x 512 attention
# matrix for the backward (8 per step would need ~24 GB). With N processes divide
# optim_wrapper.accumulative_counts by N. Schedule: the paper's AdamW, lr 1e-4, linear warm-up
# over 10,000 steps (at most 10% of the run) then linear decay to the end
# (configs/_base_/schedules/bert_adamw_linear.py).
# Precision: bfloat16 autocast on a GPU; float32 on a CPU (bf16 is emulated there, ~20x slower).
# Data: the built-in Shakespeare with a 30,522-token WordPiece vocabulary; for your own corpus
# see docs/text.md.
#
#   python tools/train.py configs/bert_large.py --fast-dev-run          # 2 steps, even on a CPU
#   python tools/train.py configs/bert_large.py --cfg-options model.num_layers=2 \
#       train_dataloader.batch_size=2 optim_wrapper.accumulative_counts=1 \
#       train_cfg.max_iters=30                       # a short run: the warm-up is 3 iterations
import torch

_base_ = [
    "_base_/models/bert.py",
    "_base_/datasets/shakespeare_bert.py",
    "_base_/schedules/bert_adamw_linear.py",
    "_base_/default_runtime.py",
]
_gpu = torch.cuda.is_available()
_seq = 512
_micro = 8 if _gpu else 2
_data = dict(dataset=dict(max_seq_length=_seq, max_predictions_per_seq=80))  # the paper's 80 at 512
train_dataloader = dict(_data, batch_size=_micro)
val_dataloader = dict(_data, batch_size=2 * _micro)
test_dataloader = dict(_data, batch_size=2 * _micro)

model = dict(
    hidden_size=1024,
    num_layers=24,
    num_heads=16,
    ffn_hidden_size=4096,
    max_position_embeddings=_seq,
)
optim_wrapper = dict(accumulative_counts=256 // _micro)
if _gpu:
    optim_wrapper = dict(type="AmpOptimWrapper", dtype="bfloat16", accumulative_counts=256 // _micro)
default_hooks = dict(checkpoint=dict(interval=10000))
work_dir = "work_dirs/bert_large"
