# Instruction-tunes the tiny GPT-2 of configs/gpt2_tiny.py on the built-in Shakespeare questions
# ("Who speaks next?", "Who speaks last in this passage?"), the loss on the answers only.
# Pretrain first (its last checkpoint is what load_from reads), then fine-tune, then ask:
#   python tools/train.py configs/gpt2_tiny.py
#   python tools/train.py configs/gpt2_tiny_instruct.py
#   python tools/generate.py configs/gpt2_tiny_instruct.py work_dirs/gpt2_tiny_instruct/iter_600.pth \
#       --greedy --instruction "Who speaks last in this passage?
#
#   LYSANDER:
#   One turf shall serve as pillow for us both;
#   HERMIA:
#   Nay, good Lysander; for my sake, my dear,"
# It answers with a name and stops; 27% of the validation answers are exact after 600 steps
# (docs/instruction_tuning.md has the figures).
# A checkpoint elsewhere: --cfg-options load_from=PATH; from scratch: load_from=None.
# docs/instruction_tuning.md walks through it, with one's own JSON lines.
_base_ = [
    "_base_/models/gpt2.py",
    "_base_/datasets/shakespeare_instruct.py",
    "_base_/schedules/gpt_adamw_cosine.py",
    "_base_/default_runtime.py",
]
model = dict(  # gpt2_tiny's dimensions: the checkpoint must fit
    vocab_size=8192,
    hidden_size=128,
    num_layers=4,
    num_heads=4,
    max_position_embeddings=128,
)
load_from = "work_dirs/gpt2_tiny/iter_1200.pth"

# pretraining's rate (5e-4 learns the questions half as fast here), a short warm-up, cosine decay
optim_wrapper = dict(optimizer=dict(lr=1e-3))
param_scheduler = [
    dict(type="LinearLR", start_factor=1e-2, begin=0, end=dict(iters=30, at_most=0.1)),
    dict(type="CosineAnnealingLR", eta_min=5e-5, begin=dict(iters=30, at_most=0.1), end=-1),
]
train_cfg = dict(max_iters=600, val_interval=200)
default_hooks = dict(checkpoint=dict(interval=200))
work_dir = "work_dirs/gpt2_tiny_instruct"
