"""The resume contract: interrupted, resumed and finished, a run is bit-identical to one that was
never interrupted: final weights, optimizer state and every logged value of every step.

Everything that carries state is switched on: shuffled data with random noise drawn at load time,
dropout, AdamW with gradient clipping and accumulation, warmup + cosine schedules, both loops.
"""

import os

import pytest
import resume_helpers as rh

from libai.checkpoint import is_complete, list_checkpoints, load_checkpoint, read_latest

LOOPS = ("IterBasedTrainLoop", "EpochBasedTrainLoop")
K = 16  # inside epoch 2 (iterations 12-22) and not a multiple of the accumulation window 3


def total_iters(loop: str) -> int:
    return 32 if loop == "IterBasedTrainLoop" else 3 * rh.ITERS_PER_EPOCH


@pytest.mark.parametrize("acc", [1, 3])
@pytest.mark.parametrize("loop", LOOPS)
def test_resume_mid_epoch_is_bit_identical(tmp_path, loop, acc):
    n = total_iters(loop)
    assert K % rh.ITERS_PER_EPOCH and (acc == 1 or K % acc)
    cfg_a = rh.contract_config(tmp_path / "straight", loop=loop, acc=acc)
    cfg_b = rh.contract_config(tmp_path / "resumed", loop=loop, acc=acc)
    straight = rh.train(cfg_a)
    assert straight.iter == n

    rh.train_interrupted(cfg_b, at=K)
    assert read_latest(tmp_path / "resumed").name == f"iter_{K}.pth"
    ckpt = load_checkpoint(tmp_path / "resumed" / f"iter_{K}.pth")
    # iter_16.pth holds the state after 16 iterations: 11 of epoch 0, 5 of epoch 1
    assert ckpt["loop"] == {"iter": K, "epoch": 1, "batch_in_epoch": K - rh.ITERS_PER_EPOCH}
    assert ckpt["meta"]["iter"] == K
    resumed = rh.train_resumed(cfg_b)

    assert resumed.iter == n
    rh.assert_same_model(straight.unwrapped_model, resumed.unwrapped_model)
    rh.assert_same_final_checkpoint(tmp_path / "straight", tmp_path / "resumed", f"iter_{n}.pth")
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", n)


@pytest.mark.parametrize(
    "checkpoint, stage",
    [(dict(interval=11), "iter"), (dict(interval=1, by_epoch=True), "epoch")],
    ids=["iter-checkpoint", "epoch-checkpoint"],
)
def test_epoch_loop_resumed_at_an_epoch_boundary(tmp_path, checkpoint, stage):
    n, k = 3 * rh.ITERS_PER_EPOCH, 2 * rh.ITERS_PER_EPOCH  # stop exactly after epoch 2
    name = f"iter_{k}.pth" if stage == "iter" else "epoch_2.pth"
    cfg_a = rh.contract_config(
        tmp_path / "straight", loop="EpochBasedTrainLoop", acc=3, checkpoint=checkpoint
    )
    cfg_b = rh.contract_config(
        tmp_path / "resumed", loop="EpochBasedTrainLoop", acc=3, checkpoint=checkpoint
    )
    straight = rh.train(cfg_a)
    rh.train_interrupted(cfg_b, at=k, stage=stage)
    assert read_latest(tmp_path / "resumed").name == name
    ckpt = load_checkpoint(tmp_path / "resumed" / name)
    # a finished epoch is stored as the start of the next one
    assert ckpt["loop"] == {"iter": k, "epoch": 2, "batch_in_epoch": 0}
    resumed = rh.train_resumed(cfg_b)

    assert resumed.iter == n and resumed.epoch == 3
    rh.assert_same_model(straight.unwrapped_model, resumed.unwrapped_model)
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", n)


@pytest.mark.parametrize("loop", LOOPS)
def test_resume_loads_only_the_remaining_samples(tmp_path, loop):
    n = total_iters(loop)
    rh.train(rh.contract_config(tmp_path / "straight", loop=loop))
    straight_loads = list(rh.LOADED)
    assert len(straight_loads) == n * rh.BATCH

    cfg = rh.contract_config(tmp_path / "resumed", loop=loop)
    rh.LOADED.clear()
    rh.train_interrupted(cfg, at=K)
    assert rh.LOADED == straight_loads[: K * rh.BATCH]
    rh.LOADED.clear()
    rh.train_resumed(cfg)
    # the samples of the skipped part of the epoch are never loaded, nothing is loaded twice
    assert len(rh.LOADED) == (n - K) * rh.BATCH
    assert rh.LOADED == straight_loads[K * rh.BATCH :]


@pytest.mark.parametrize("acc", [1, 3])
def test_async_saving_keeps_the_contract(tmp_path, acc):
    n = 32
    checkpoint = dict(interval=2, async_save=True)
    cfg_a = rh.contract_config(tmp_path / "straight", acc=acc, checkpoint=checkpoint)
    cfg_b = rh.contract_config(tmp_path / "resumed", acc=acc, checkpoint=checkpoint)
    straight = rh.train(cfg_a)
    rh.train_interrupted(cfg_b, at=K)
    # the save in flight when Ctrl-C arrived was finished before train() let go
    assert read_latest(tmp_path / "resumed").name == f"iter_{K}.pth"
    assert is_complete(tmp_path / "resumed" / f"iter_{K}.pth")
    resumed = rh.train_resumed(cfg_b)

    rh.assert_same_model(straight.unwrapped_model, resumed.unwrapped_model)
    rh.assert_same_final_checkpoint(tmp_path / "straight", tmp_path / "resumed", f"iter_{n}.pth")
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", n)
    for work in ("straight", "resumed"):
        folder = tmp_path / work
        names = sorted(p.name for p in list_checkpoints(folder))
        assert names == sorted(f"iter_{i}.pth" for i in range(2, n + 1, 2))
        for path in list_checkpoints(folder):
            assert is_complete(path), path
            load_checkpoint(path)
        assert not [f for f in os.listdir(folder) if ".tmp-" in f]
        assert read_latest(folder).name == f"iter_{n}.pth"


def test_logged_grad_norm_survives_resume_inside_an_accumulation_window(tmp_path):
    # With accumulation 3 the optimizer steps (and measures grad_norm) at iterations 3, 6, ...
    # Resumed at 16, the rows of steps 16-17 must still match the uninterrupted run's.
    cfg_a = rh.contract_config(tmp_path / "straight", acc=3)
    cfg_b = rh.contract_config(tmp_path / "resumed", acc=3)
    rh.train(cfg_a)
    rh.train_interrupted(cfg_b, at=K)
    rh.train_resumed(cfg_b)
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", 32, skip=rh.MEASURED)
