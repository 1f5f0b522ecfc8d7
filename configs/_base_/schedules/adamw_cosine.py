# AdamW with a linear warm-up then cosine decay to the end of training. The warm-up is 100
# iterations but at most 10% of the run, so that train_cfg.max_iters=N works for any N.
optim_wrapper = dict(
    type="OptimWrapper",
    optimizer=dict(type="AdamW", lr=2e-3, weight_decay=1e-4),
    clip_grad=dict(type="norm", max_norm=5.0),
)
_warmup = dict(iters=100, at_most=0.1)
param_scheduler = [
    dict(type="LinearLR", start_factor=0.1, begin=0, end=_warmup),
    dict(type="CosineAnnealingLR", begin=_warmup, end=-1, eta_min=1e-5),
]
train_cfg = dict(type="IterBasedTrainLoop", max_iters=2000, val_interval=500)
val_cfg = dict(type="ValLoop", limit_batches=None)  # N: only the first N batches (or a share)
test_cfg = dict(type="TestLoop", limit_batches=None)
