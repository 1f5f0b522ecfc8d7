# GPT-2 small as reproduced by nanoGPT and Megatron-LM: AdamW lr 6e-4, betas (0.9, 0.95),
# weight decay 0.1 (not on biases and LayerNorm), gradient clipping at 1.0, linear warm-up over
# 2,000 steps, cosine decay to 6e-5 at 600,000 steps. The warm-up is written as 2,000 steps but
# at most 10% of the run, and the decay runs to the end, so train_cfg.max_iters=N works for any N.
optim_wrapper = dict(
    type="OptimWrapper",
    optimizer=dict(type="AdamW", lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
    paramwise_cfg=dict(bias_decay_mult=0.0, norm_decay_mult=0.0),
    clip_grad=dict(type="norm", max_norm=1.0),
)
_warmup = dict(iters=2000, at_most=0.1)
param_scheduler = [
    dict(type="LinearLR", start_factor=1e-3, begin=0, end=_warmup),
    dict(type="CosineAnnealingLR", eta_min=6e-5, begin=_warmup, end=-1),
]
train_cfg = dict(type="IterBasedTrainLoop", max_iters=600_000, val_interval=2000)
val_cfg = dict(type="ValLoop", limit_batches=None)  # N: only the first N batches (or a share)
test_cfg = dict(type="TestLoop", limit_batches=None)
