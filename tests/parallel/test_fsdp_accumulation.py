"""FSDP2 with gradient accumulation gathers once per optimizer step (issue 37 item 4): on 2 forked
ranks (gloo, CPU), tools/train.py's main on gpt2_tiny shrunk to 2 blocks, accumulating 4
micro-batches per step, counts FSDP2's collectives per micro-batch.

"Gathers once per step", concretely: the model has 3 FSDP units (2 blocks and the root with the
embeddings and head). In one optimizer step of 4 micro-batches each unit is all-gathered once
(in the first micro-batch's forward: the blocks stay gathered through the window, the backward
gathers nothing) and reduce-scattered once (in the last micro-batch's backward), instead of
gathered in every forward and again in every backward (blocks) and reduce-scattered in every
backward. The numbers equal one process's: the parity row bert/fsdp+acc2
(tests/parallel/test_parity.py). Device: CPU.
"""

import sys

import torch.distributed as dist

from libai.optim import OptimWrapper

UNITS, K, STEPS = 3, 4, 2

SHRINK = ["model.num_layers=2", "model.hidden_size=64", "model.num_heads=4",
          "model.hidden_dropout=0.0", "model.attention_dropout=0.0"]


def _count_per_micro_batch(work_dir: str) -> list[tuple[int, int]]:
    """In a rank: (all-gathers, reduce-scatters) FSDP2 ran in each micro-batch (from the end of
    one ``update_params`` to the end of the next: its forward and its backward)."""
    from libai.cli.train import main
    from libai.utils.cli import run_cli

    counts = {"all_gather_single": 0, "reduce_scatter_single": 0}
    for name in counts:  # FSDP2 calls them as torch.distributed.NAME (_fsdp_collectives.py)
        real = getattr(dist, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            counts[_name] += 1
            return _real(*args, **kwargs)

        setattr(dist, name, counted)
    per_micro_batch, update = [], OptimWrapper.update_params
    seen = [0, 0]

    def update_params(self, *args, **kwargs):
        update(self, *args, **kwargs)
        now = [counts["all_gather_single"], counts["reduce_scatter_single"]]
        per_micro_batch.append((now[0] - seen[0], now[1] - seen[1]))
        seen[:] = now

    OptimWrapper.update_params = update_params
    argv = ["configs/gpt2_tiny.py", "--work-dir", work_dir, "--cfg-options", *SHRINK,
            "parallel.fsdp=2", f"+optim_wrapper.accumulative_counts={K}",
            f"train_cfg.max_iters={K * STEPS}", f"train_cfg.val_interval={K * STEPS}",
            "train_dataloader.batch_size=2", "val_dataloader=None", "val_evaluator=None",
            "test_dataloader=None", "test_evaluator=None", "default_hooks.checkpoint.interval=100",
            "default_hooks.checkpoint.save_best=None", "+default_hooks.logger.plot=False",
            "+default_hooks.throughput.count_flops=False"]
    sys.argv = ["tools/train.py", *argv]
    try:
        run_cli(main, argv)
    except SystemExit as e:
        assert not e.code, e.code
    return per_micro_batch


def test_fsdp_gathers_and_reduces_each_unit_once_per_optimizer_step(tmp_path, spawn_ranks):
    ranks = spawn_ranks(2, _count_per_micro_batch, str(tmp_path), timeout=300).check()
    for rank in ranks.ranks:
        counts = rank.value
        assert len(counts) == K * STEPS, rank.output[-3000:]
        gathers = [g for g, _ in counts]
        reduces = [r for _, r in counts]
        # today's code: 5 gathers (root once, each block in its forward and its backward) and 3
        # reduce-scatters in every micro-batch
        assert gathers == [UNITS, 0, 0, 0] * STEPS, counts
        assert reduces == [0, 0, 0, UNITS] * STEPS, counts
