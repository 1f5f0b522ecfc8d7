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
# pipeline x fsdp x tensor leave, so one process trains alone and N processes are DDP.
# rank0_init=True: only rank 0 builds the whole model, the others receive their part (host
# memory: one model, not N). pipeline=P: P stages; the pipeline_* keys, microbatches and
# virtual_stages apply then (None: 1f1b, the largest divisor of the batch up to 4 x the stages,
# a balanced split, one stage per process). fsdp=None is 1; written fsdp=1 with cpu_offload=True
# in one process, FSDP2 shards over a one-process mesh with the host's memory (docs/parallel.md).
parallel = dict(data=None, fsdp=None, tensor=1, rank0_init=False, pipeline=1,
                pipeline_schedule=None, microbatches=None, pipeline_stage_ids=None,
                virtual_stages=None)
activation_checkpointing = None  # or "blocks", or dict(modules=["TransformerBlock"])
