# A tiny GPT-2 (4 layers, hidden 128, 4 heads) trained from scratch on the built-in Shakespeare,
# blocks of 128 tokens, an 8,192-token byte-level BPE vocabulary. Trains on 2 CPU cores in about
# 17 minutes; then sample from it:
#   python tools/train.py configs/gpt2_tiny.py
#   python tools/generate.py configs/gpt2_tiny.py work_dirs/gpt2_tiny/iter_1200.pth --prompt "ROMEO:"
_base_ = [
    "_base_/models/gpt2.py",
    "_base_/datasets/shakespeare_gpt.py",
    "_base_/schedules/gpt_adamw_cosine.py",
    "_base_/default_runtime.py",
]
_vocab_size = 8192  # the tokenizer is trained to exactly this size; the model must match it
_seq = 128
_data = dict(
    dataset=dict(corpus=dict(tokenizer=dict(vocab_size=_vocab_size)), seq_length=_seq),
    batch_size=16,
)
train_dataloader = _data
val_dataloader = _data
test_dataloader = _data

model = dict(
    vocab_size=_vocab_size,
    hidden_size=128,
    num_layers=4,
    num_heads=4,
    max_position_embeddings=_seq,
)
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [  # warm-up: 100 iterations but at most 10% of the run; decay to the end
    dict(type="LinearLR", start_factor=1e-3, begin=0, end=dict(iters=100, at_most=0.1)),
    dict(type="CosineAnnealingLR", eta_min=1e-4, begin=dict(iters=100, at_most=0.1), end=-1),
]
train_cfg = dict(max_iters=1200, val_interval=400)
default_hooks = dict(checkpoint=dict(interval=400))
work_dir = "work_dirs/gpt2_tiny"
