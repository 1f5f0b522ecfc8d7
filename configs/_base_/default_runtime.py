# Runtime defaults shared by the shipped configs: logging, checkpoints, randomness.
default_hooks = dict(
    logger=dict(interval=50),
    checkpoint=dict(interval=500, max_keep_ckpts=3, save_best="auto"),
)
randomness = dict(seed=0, deterministic=False)
log_level = "INFO"
resume = False
load_from = None
# How the processes of a torchrun launch split the work (docs/parallel.md): data=None takes what
# fsdp x tensor leave, so one process trains alone and N processes are DDP. rank0_init=True: only
# rank 0 builds the whole model, the others receive their part (host memory: one model, not N).
parallel = dict(data=None, fsdp=1, tensor=1, rank0_init=False)
activation_checkpointing = None  # or "blocks", or dict(modules=["TransformerBlock"])
