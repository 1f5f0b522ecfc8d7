# AdamW with a linear warm-up then cosine decay, by iterations.
optim_wrapper = dict(
    type="OptimWrapper",
    optimizer=dict(type="AdamW", lr=2e-3, weight_decay=1e-4),
    clip_grad=dict(type="norm", max_norm=5.0),
)
param_scheduler = [
    dict(type="LinearLR", start_factor=0.1, begin=0, end=100),
    dict(type="CosineAnnealingLR", begin=100, eta_min=1e-5),
]
train_cfg = dict(type="IterBasedTrainLoop", max_iters=2000, val_interval=500)
val_cfg = dict(type="ValLoop")
test_cfg = dict(type="TestLoop")
