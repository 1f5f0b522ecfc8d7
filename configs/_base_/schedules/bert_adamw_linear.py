# BERT's schedule (Devlin et al., 2019, appendix A.2): AdamW lr 1e-4, betas (0.9, 0.999),
# weight decay 0.01 (not on biases and LayerNorm), linear warm-up over the first 10,000 steps,
# then linear decay to 0 at 1,000,000 steps. The warm-up is written as 10,000 steps but at most
# 10% of the run, and the decay runs to the end, so train_cfg.max_iters=N works for any N.
optim_wrapper = dict(
    type="OptimWrapper",
    optimizer=dict(type="AdamW", lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01),
    paramwise_cfg=dict(bias_decay_mult=0.0, norm_decay_mult=0.0),
    clip_grad=dict(type="norm", max_norm=1.0),
)
_warmup = dict(iters=10000, at_most=0.1)
param_scheduler = [
    dict(type="LinearLR", start_factor=1e-3, begin=0, end=_warmup),
    dict(type="PolyLR", power=1.0, eta_min=0.0, begin=_warmup, end=-1),
]
train_cfg = dict(type="IterBasedTrainLoop", max_iters=1_000_000, val_interval=10000)
val_cfg = dict(type="ValLoop", limit_batches=None)  # N: only the first N batches (or a share)
test_cfg = dict(type="TestLoop", limit_batches=None)
