#!/bin/bash
# Train with libai on a Slurm cluster (docs/cluster.md). From the checkout:
#
#   sbatch [--nodes=N --ntasks-per-node=P ...] tools/slurm_train.sh CONFIG [train.py arguments]
#   LAUNCHER=torchrun sbatch ... tools/slurm_train.sh CONFIG ...   # one torchrun per node
#
# Two minutes before the time limit Slurm sends SIGUSR1: every process finishes its step, the
# step is saved, rank 0 requeues the job, and the requeued job (SLURM_RESTART_COUNT > 0) resumes
# from that checkpoint. A mistake in the config fails the job with one line, and it is not
# requeued. The #SBATCH lines are defaults: options given to sbatch win.
#SBATCH --job-name=libai
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: sbatch tools/slurm_train.sh CONFIG [tools/train.py arguments]" >&2
    exit 2
fi
config=$1
shift
# A requeued job continues from the latest checkpoint of its work dir; the first run starts fresh.
resume=()
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then
    resume=(--resume)
fi
python=${PYTHON:-python}
echo "libai: Slurm job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST: $config $*"

if [ "${LAUNCHER:-srun}" = torchrun ]; then
    # One task per node, each starting one process per task slot of its node; the first node
    # hosts the rendezvous. torchrun passes SIGUSR1 on to its workers and waits for them to save.
    head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    per_node=${SLURM_NTASKS_PER_NODE:-$((SLURM_NTASKS / SLURM_NNODES))}
    srun --ntasks="$SLURM_NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \
        "$python" -m torch.distributed.run \
        --nnodes "$SLURM_NNODES" --nproc_per_node "$per_node" \
        --rdzv-backend c10d --rdzv-endpoint "$head_node:$((20000 + SLURM_JOB_ID % 10000))" \
        --rdzv-id "$SLURM_JOB_ID" --signals-to-handle SIGTERM,SIGINT,SIGUSR1 --shutdown-timeout 110 \
        tools/train.py "$config" "${resume[@]}" "$@"
else
    # One task per process: libai reads each task's rank, local rank and the node list from
    # Slurm's variables (no torchrun).
    srun --kill-on-bad-exit=1 "$python" tools/train.py "$config" "${resume[@]}" "$@"
fi
