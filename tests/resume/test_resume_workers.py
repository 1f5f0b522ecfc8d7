"""Exact resume with data loader worker processes and random augmentation.

Each worker draws augmentation randomness from its own stream, so skipping part of an epoch would
shift what every later sample receives. With ``DefaultSampler(seed_per_sample=True)`` a sample's
augmentation depends only on (seed, epoch, index): the documented way to resume exactly with
workers (docs/checkpoint.md).
"""

import resume_helpers as rh

from libai.checkpoint import load_checkpoint

# the train split of 10% of the digits (180 images) at batch 16: 12 iterations per epoch; K inside
# epoch 0 and inside an accumulation window of 3, N in epoch 1
N, K = 16, 7


def workers_config(work_dir):
    cfg = rh.contract_config(work_dir, acc=3, max_iters=N)
    cfg["model"] = dict(type="DigitsMLP", hidden=32, dropout=0.1)
    cfg["train_dataloader"] = dict(
        dataset=dict(
            type="DigitsDataset",
            split="train",
            val_ratio=0.9,
            transform=[dict(type="RandomShift", max_shift=1), dict(type="RandomNoise", std=0.05)],
        ),
        sampler=dict(type="DefaultSampler", shuffle=True, seed_per_sample=True),
        batch_size=16,
        num_workers=2,
    )
    cfg["default_hooks"]["checkpoint"] = dict(interval=K)
    return cfg


def test_resume_with_two_workers_and_per_sample_seeds_is_bit_identical(tmp_path):
    straight = rh.train(workers_config(tmp_path / "straight"))
    cfg = workers_config(tmp_path / "resumed")
    rh.train_interrupted(cfg, at=K)
    assert load_checkpoint(tmp_path / "resumed" / f"iter_{K}.pth")["loop"] == {
        "iter": K,
        "epoch": 0,
        "batch_in_epoch": K,
    }
    resumed = rh.train_resumed(cfg)

    assert resumed.iter == N
    rh.assert_same_model(straight.unwrapped_model, resumed.unwrapped_model)
    rh.assert_same_final_checkpoint(tmp_path / "straight", tmp_path / "resumed", f"iter_{N}.pth")
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", N)
