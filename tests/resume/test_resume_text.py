"""Exact resume for the shipped text configs: bert_tiny (masked LM + NSP) and gpt2_tiny.

Their samples are pure functions of (seed, epoch, index) (``seed_per_sample=True``), so an
interrupted and resumed run must end bit-identical to an uninterrupted one, with data loader
workers or without: the same weights, optimizer state and every logged value.
"""

import os

import pytest
import resume_helpers as rh

from libai.config import Config

N, K = 10, 4  # interrupt after iteration K (a checkpoint), resume to N


def text_config(name, work_dir, num_workers):
    cfg = Config.fromfile(os.path.join(rh.ROOT, "configs", f"{name}.py")).to_dict()
    cfg["work_dir"] = str(work_dir)
    cfg["train_dataloader"].update(batch_size=4, num_workers=num_workers)
    cfg["train_cfg"].update(max_iters=N, val_interval=1000)
    cfg["optim_wrapper"]["accumulative_counts"] = 2
    cfg["param_scheduler"] = [
        dict(type="LinearLR", start_factor=0.1, begin=0, end=4),
        dict(type="CosineAnnealingLR", begin=4),
    ]
    cfg["default_hooks"] = dict(logger=rh.quiet_logger(), checkpoint=dict(interval=K))
    cfg["randomness"] = dict(seed=0, deterministic=True)
    cfg["log_level"] = "WARNING"
    for key in ("val_dataloader", "val_evaluator", "val_cfg", "test_dataloader",
                "test_evaluator", "test_cfg"):
        cfg.pop(key, None)
    return cfg


@pytest.mark.parametrize("num_workers", [0, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", ["bert_tiny", "gpt2_tiny"])
def test_text_config_resumes_bit_identical(tmp_path, name, num_workers):
    straight = rh.train(text_config(name, tmp_path / "straight", num_workers))
    cfg = text_config(name, tmp_path / "resumed", num_workers)
    rh.train_interrupted(cfg, at=K)
    resumed = rh.train_resumed(cfg)

    assert resumed.iter == N
    rh.assert_same_model(straight.unwrapped_model, resumed.unwrapped_model)
    rh.assert_same_final_checkpoint(tmp_path / "straight", tmp_path / "resumed", f"iter_{N}.pth")
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", N)
    losses = [row["train/loss"] for row in rh.train_rows(tmp_path / "straight")]
    assert len(set(losses)) == N  # every step trained on a different batch
