# BERT-large (Devlin et al., 2019): 24 layers, hidden 1024, 16 heads, ffn 4096, 512 positions,
# 336 M parameters at the 30,522-token vocabulary; masked LM + next sentence prediction on
# sequences of 512 tokens.
#
# Batch: a global batch of 256 sequences per optimizer step, over all processes. The micro-batch
# is chosen from the device (micro_batch below, libai/runner/batch_fit.py) and the accumulation
# keeps the 256 (256 / (micro-batch x processes)); the log says what it chose. The table: on an
# H200 the shipped 8 per step peaked at 10.1 GB eager (issue 37), ~5.4 GB of it the fp32
# weights, gradients and AdamW state, so ~0.6 GB per sequence of 512; a micro-batch m takes
# ~5.4 + 0.6 m GB, and a row asks for 30% more (allocator, graph mode, the validation batch):
# 8 from 14 GB, 16 from 21, 32 from 35, 64 from 62 (the benchmark measures 8 to 64). On a CPU
# 2 per step x 128, where attention dropout makes torch keep every 512 x 512 attention matrix
# for the backward (8 per step would need ~24 GB). train_dataloader.batch_size=N wins (and the
# accumulation still keeps 256 when N divides it); so does optim_wrapper.accumulative_counts.
# Schedule: the paper's AdamW, lr 1e-4, linear warm-up
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
micro_batch = dict(global_batch=256, table=[(14, 8), (21, 16), (35, 32), (62, 64)], cpu=2)
_data = dict(dataset=dict(max_seq_length=_seq, max_predictions_per_seq=80))  # the paper's 80 at 512
train_dataloader = dict(_data, batch_size="auto")
val_dataloader = dict(_data, batch_size=16 if _gpu else 4)
test_dataloader = dict(_data, batch_size=16 if _gpu else 4)

model = dict(
    hidden_size=1024,
    num_layers=24,
    num_heads=16,
    ffn_hidden_size=4096,
    max_position_embeddings=_seq,
)
optim_wrapper = dict(accumulative_counts="auto")  # 256 / (micro-batch x processes)
if _gpu:
    optim_wrapper = dict(type="AmpOptimWrapper", dtype="bfloat16", accumulative_counts="auto")
default_hooks = dict(checkpoint=dict(interval=10000))
work_dir = "work_dirs/bert_large"
