# Runtime defaults shared by the shipped configs: logging, checkpoints, randomness.
default_hooks = dict(
    logger=dict(interval=50),
    checkpoint=dict(interval=500, max_keep_ckpts=3, save_best="auto"),
)
randomness = dict(seed=0, deterministic=False)
log_level = "INFO"
resume = False
load_from = None
