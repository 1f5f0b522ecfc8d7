# GPT-2 small as reproduced by nanoGPT and Megatron-LM: AdamW lr 6e-4, betas (0.9, 0.95),
# weight decay 0.1 (not on biases and LayerNorm), gradient clipping at 1.0, linear warm-up over
# 2,000 steps, cosine decay to 6e-5 at 600,000 steps.
optim_wrapper = dict(
    type="OptimWrapper",
    optimizer=dict(type="AdamW", lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
    paramwise_cfg=dict(bias_decay_mult=0.0, norm_decay_mult=0.0),
    clip_grad=dict(type="norm", max_norm=1.0),
)
param_scheduler = [
    dict(type="LinearLR", start_factor=1e-3, begin=0, end=2000),
    dict(type="CosineAnnealingLR", eta_min=6e-5, begin=2000),
]
train_cfg = dict(type="IterBasedTrainLoop", max_iters=600_000, val_interval=2000)
val_cfg = dict(type="ValLoop")
test_cfg = dict(type="TestLoop")
