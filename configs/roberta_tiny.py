# RoBERTa-tiny: bert_tiny's size (2 layers, hidden 128, 2 heads, ffn 512) trained the RoBERTa
# way on the built-in Shakespeare: masked LM only (no next sentence), masks drawn anew each
# epoch (dynamic masking), an 8,192-token byte-level BPE with RoBERTa's <s> <pad> </s> <unk>
# <mask>, sequences of 128 tokens (130 position rows: positions count from <pad> = 1).
# bert_tiny's steps and schedule:
#   python tools/train.py configs/roberta_tiny.py
#   python tools/test.py configs/roberta_tiny.py work_dirs/roberta_tiny/iter_1500.pth
_base_ = [
    "_base_/models/roberta.py",
    "_base_/datasets/shakespeare_roberta.py",
    "_base_/schedules/bert_adamw_linear.py",
    "_base_/default_runtime.py",
]
_vocab_size = 8192  # the tokenizer is trained to exactly this size; the model must match it
_seq = 128
_data = dict(dataset=dict(corpus=dict(tokenizer=dict(vocab_size=_vocab_size)), max_seq_length=_seq))
train_dataloader = _data
val_dataloader = _data
test_dataloader = _data

model = dict(
    vocab_size=_vocab_size,
    hidden_size=128,
    num_layers=2,
    num_heads=2,
    ffn_hidden_size=512,
    max_position_embeddings=_seq + 2,  # pad_token_id + 1 rows before the first token's
)
# a small model on little data learns faster with a larger rate and a short warm-up (bert_tiny's)
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [  # warm-up: 100 iterations but at most 10% of the run; decay to the end
    dict(type="LinearLR", start_factor=1e-3, begin=0, end=dict(iters=100, at_most=0.1)),
    dict(type="PolyLR", power=1.0, eta_min=0.0, begin=dict(iters=100, at_most=0.1), end=-1),
]
train_cfg = dict(max_iters=1500, val_interval=500)
default_hooks = dict(checkpoint=dict(interval=500))
work_dir = "work_dirs/roberta_tiny"
