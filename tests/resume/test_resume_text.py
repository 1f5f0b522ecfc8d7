"""Exact resume for the shipped text configs: bert_tiny (masked LM + NSP) and gpt2_tiny.

Their samples are pure functions of (seed, epoch, index) (``seed_per_sample=True``), so an
interrupted and resumed run must end bit-identical to an uninterrupted one, with data loader
workers or without: the same weights, optimizer state and every logged value. One straight run
without workers is the reference of both resumed runs: with workers the run is the same run.

The configs' data loaders, model classes and dropout are kept; the model is made smaller
(hidden 64) and the blocks shorter (32 tokens): what resume keeps does not depend on the size.
"""

import pytest
import resume_helpers as rh

N, K = 10, 4  # interrupt after iteration K (a checkpoint), resume to N

SMALLER = {
    "bert_tiny": ["model.hidden_size=64", "model.ffn_hidden_size=256",
                  "train_dataloader.dataset.max_seq_length=32"],
    "gpt2_tiny": ["model.hidden_size=64", "model.num_layers=2",
                  "train_dataloader.dataset.seq_length=32"],
}


def text_config(shipped_config, name, work_dir, num_workers):
    cfg = shipped_config(name, *SMALLER[name]).to_dict()
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


@pytest.mark.parametrize("name", ["bert_tiny", "gpt2_tiny"])
def test_text_config_resumes_bit_identical_with_and_without_workers(tmp_path, shipped_config,
                                                                     name):
    straight = tmp_path / "straight"
    rh.train(text_config(shipped_config, name, straight, 0))
    losses = [row["train/loss"] for row in rh.train_rows(straight)]
    assert len(set(losses)) == N  # every step trained on a different batch
    for num_workers in (0, 2):
        work = tmp_path / f"resumed-{num_workers}-workers"
        cfg = text_config(shipped_config, name, work, num_workers)
        rh.train_interrupted(cfg, at=K)
        resumed = rh.train_resumed(cfg)
        assert resumed.iter == N
        rh.assert_same_final_checkpoint(straight, work, f"iter_{N}.pth")
        rh.assert_same_logs(straight, work, N)
