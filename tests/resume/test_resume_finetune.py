"""Exact resume of a fine-tuning run: configs/bert_tiny_genre.py (its data loaders: the genre set,
length-grouped batches, dynamic padding) started from a pretraining checkpoint, interrupted and
resumed, ends bit-identical to the uninterrupted run.

The genre set (the config's dataset dict) is built once and handed to the three runs' loaders:
tokenizing its passages is most of a run's time, and its samples do not depend on the run."""

import resume_helpers as rh
import torch

from libai.checkpoint import model_state_for_saving, save_checkpoint
from libai.registry import DATASETS, MODELS

N, K = 8, 4  # interrupt after iteration K (a checkpoint), resume to N


def genre_config(shipped_config, work_dir, pretrained, dataset):
    cfg = shipped_config("bert_tiny_genre").to_dict()
    cfg["work_dir"] = str(work_dir)
    cfg["train_dataloader"]["dataset"] = dataset
    cfg["load_from"] = dict(path=str(pretrained), strict=False)
    cfg["train_dataloader"]["batch_size"] = 4
    cfg["train_cfg"].update(max_iters=N, val_interval=1000)
    cfg["optim_wrapper"]["accumulative_counts"] = 2
    cfg["optim_wrapper"]["paramwise_cfg"]["layer_decay_rate"] = 0.8
    cfg["default_hooks"] = dict(logger=rh.quiet_logger(), checkpoint=dict(interval=K))
    cfg["randomness"] = dict(seed=0, deterministic=True)
    cfg["log_level"] = "WARNING"
    for key in ("val_dataloader", "val_evaluator", "val_cfg", "test_dataloader",
                "test_evaluator", "test_cfg"):
        cfg.pop(key, None)
    return cfg


def test_fine_tuning_resumes_bit_identical(tmp_path, shipped_config):
    pre = shipped_config("bert_tiny").model.to_dict()
    torch.manual_seed(1)
    save_checkpoint({"state_dict": model_state_for_saving(MODELS.build(pre))},
                    str(tmp_path / "pre.pth"))
    dataset = DATASETS.build(shipped_config("bert_tiny_genre").train_dataloader.dataset.to_dict())
    straight = rh.train(genre_config(shipped_config, tmp_path / "straight", tmp_path / "pre.pth",
                                     dataset))
    cfg = genre_config(shipped_config, tmp_path / "resumed", tmp_path / "pre.pth", dataset)
    rh.train_interrupted(cfg, at=K)
    resumed = rh.train_resumed(cfg)

    assert resumed.iter == N
    rh.assert_same_model(straight.unwrapped_model, resumed.unwrapped_model)
    rh.assert_same_final_checkpoint(tmp_path / "straight", tmp_path / "resumed", f"iter_{N}.pth")
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", N)
    losses = [row["train/loss"] for row in rh.train_rows(tmp_path / "straight")]
    assert len(set(losses)) == N  # every step trained on a different batch
