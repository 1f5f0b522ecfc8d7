# A tiny Llama (4 layers, hidden 128, 4 query heads sharing 2 key/value heads, SwiGLU width 344)
# trained from scratch on the built-in Shakespeare: the data, size, steps and schedule of
# configs/gpt2_tiny.py (blocks of 128 tokens, an 8,192-token byte-level BPE vocabulary), so the
# two compare. The SwiGLU's three 128 x 344 matrices hold about what GPT-2's two 128 x 512 do;
# rotary positions replace the learned ones, with base 10,000 for the short context (Llama 3's
# frequency scaling, kept from the base config, only touches wavelengths over 2,048 tokens). No
# dropout, as Llama. Trains on 2 CPU cores in about 14 minutes (validation perplexity 159 at the
# end, gpt2_tiny 224); then sample from it:
#   python tools/train.py configs/llama_tiny.py
#   python tools/generate.py configs/llama_tiny.py work_dirs/llama_tiny/iter_1200.pth --prompt "ROMEO:"
_base_ = [
    "_base_/models/llama.py",
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
    num_kv_heads=2,
    ffn_hidden_size=344,
    max_position_embeddings=_seq,
    rope_theta=10000.0,
)
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [  # warm-up: 100 iterations but at most 10% of the run; decay to the end
    dict(type="LinearLR", start_factor=1e-3, begin=0, end=dict(iters=100, at_most=0.1)),
    dict(type="CosineAnnealingLR", eta_min=1e-4, begin=dict(iters=100, at_most=0.1), end=-1),
]
train_cfg = dict(max_iters=1200, val_interval=400)
default_hooks = dict(checkpoint=dict(interval=400))
work_dir = "work_dirs/llama_tiny"
