"""The stateful-parts contract of the Checkpointer (issue 36 item 4): every part it saves is a
``Stateful`` under a fixed name, it handles each alike (no part is known to it by name), and a
part under a new name is saved and restored with no change to it. CPU, in-process."""

import logging

import pytest
from torch import nn

from libai.checkpoint import Checkpointer, load_checkpoint
from libai.config import Config
from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.errors import CheckpointError

# the names the runner gives its parts: the keys of the file since the first checkpoints
FIXED = {"loop", "sampler", "optimizer", "param_schedulers", "message_hub", "hooks"}


class Counter:
    def __init__(self, n: int = 0) -> None:
        self.n = n

    def state_dict(self) -> dict:
        return {"n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.n = state["n"]


class Position(Counter):
    """A loop of one's own: a position and nothing else (no data loader, no max_iters)."""

    def state_dict(self) -> dict:
        return {"iter": self.n, "epoch": 0, "batch_in_epoch": 0}

    def load_state_dict(self, state: dict) -> None:
        self.n = state["iter"]


def _config(tmp_path, **kw):
    return toy_config(work_dir=str(tmp_path), train_cfg=dict(max_iters=4, val_interval=10),
                      default_hooks=dict(checkpoint=dict(type="CheckpointHook", interval=2),
                                         logger=dict(plot=False)), **kw)


def _is_stateful(part) -> bool:
    return callable(getattr(part, "state_dict", None)) and \
        callable(getattr(part, "load_state_dict", None))


def test_every_part_is_a_stateful_under_a_fixed_name_and_the_file_is_the_parts(tmp_path):
    runner = Runner.from_cfg(_config(tmp_path))
    runner.train()
    parts = runner.checkpointer.parts
    assert set(parts) == FIXED  # the sampler too: a part of its own, not reached via the loop
    assert all(_is_stateful(p) for p in parts.values())
    ckpt = load_checkpoint(str(tmp_path / "iter_4.pth"))
    assert set(ckpt) == FIXED | {"meta", "state_dict", "rng"}  # the format, unchanged
    sampler = runner.train_loop.dataloader.sampler
    assert ckpt["sampler"] == sampler.state_dict() == parts["sampler"].state_dict()
    assert ckpt["loop"] == parts["loop"].state_dict() and ckpt["meta"]["iter"] == 4
    assert {"optimizer", "inner_count", "grad_norm"} <= set(ckpt["optimizer"])


def test_any_set_of_parts_is_saved_and_restored_alike(tmp_path):
    """A bare Checkpointer with a loop of one's own and no optimizer, schedulers or sampler:
    it needs no part but the ones it is given, and a new name needs nothing new."""
    cfg = Config(toy_config(work_dir=str(tmp_path)))

    def checkpointer():
        return Checkpointer(str(tmp_path), nn.Linear(2, 2), nn.Linear(2, 2), cfg=cfg,
                            logger=logging.getLogger("libai"), call_hook=lambda *a, **k: None)

    saving = checkpointer()
    saving.track(loop=Position(5), weather=Counter(7))
    path = saving.save("iter_5.pth")
    ckpt = load_checkpoint(path)
    assert ckpt["weather"] == {"n": 7} and ckpt["meta"]["iter"] == 5
    assert not {"optimizer", "sampler", "param_schedulers"} & set(ckpt)

    loading = checkpointer()
    loop, weather, later = Position(), Counter(), Counter(3)
    loading.track(loop=loop, weather=weather, later=later)  # `later`: not in the file
    loading.resume(path)
    assert (loop.n, weather.n, later.n) == (5, 7, 3)


def test_a_part_must_be_stateful_and_not_take_a_key_of_the_file(tmp_path):
    cfg = Config(toy_config(work_dir=str(tmp_path)))
    ckpt = Checkpointer(str(tmp_path), nn.Linear(2, 2), nn.Linear(2, 2), cfg=cfg,
                        logger=logging.getLogger("libai"), call_hook=lambda *a, **k: None)
    with pytest.raises(CheckpointError, match="'rng' is a key of the file itself"):
        ckpt.track(rng=Counter())
    with pytest.raises(CheckpointError, match="object has no state_dict"):
        ckpt.track(notes=object())
