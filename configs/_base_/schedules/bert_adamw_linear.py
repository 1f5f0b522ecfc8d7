# BERT's schedule (Devlin et al., 2019, appendix A.2): AdamW lr 1e-4, betas (0.9, 0.999),
# weight decay 0.01 (not on biases and LayerNorm), linear warm-up over the first 10,000 steps,
# then linear decay to 0 at 1,000,000 steps.
optim_wrapper = dict(
    type="OptimWrapper",
    optimizer=dict(type="AdamW", lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01),
    paramwise_cfg=dict(bias_decay_mult=0.0, norm_decay_mult=0.0),
    clip_grad=dict(type="norm", max_norm=1.0),
)
param_scheduler = [
    dict(type="LinearLR", start_factor=1e-3, begin=0, end=10000),
    dict(type="PolyLR", power=1.0, eta_min=0.0, begin=10000),
]
train_cfg = dict(type="IterBasedTrainLoop", max_iters=1_000_000, val_interval=10000)
val_cfg = dict(type="ValLoop")
test_cfg = dict(type="TestLoop")
