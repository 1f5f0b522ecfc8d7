"""get_rng_state / set_rng_state: exact round trip through a weights_only checkpoint."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from libai.checkpoint import get_rng_state, load_checkpoint, save_checkpoint, set_rng_state
from libai.utils.errors import CheckpointError


def _draw() -> tuple:
    return (
        random.random(),
        random.gauss(0, 1),
        np.random.rand(3).tolist(),
        np.random.standard_normal(2).tolist(),
        torch.rand(3).tolist(),
        torch.randint(0, 1000, (4,)).tolist(),
        torch.rand(2, device="cuda").tolist() if torch.cuda.is_available() else None,
    )


def test_rng_round_trip_through_checkpoint(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    _draw()
    random.gauss(0, 1)  # leaves a cached Gaussian in Python's state
    np.random.randn()  # and in numpy's legacy state
    path = tmp_path / "rng.pth"
    save_checkpoint({"rng": get_rng_state()}, path)
    expected = _draw()
    _draw()  # move every generator on
    set_rng_state(load_checkpoint(path)["rng"])
    assert _draw() == expected


def test_rng_state_holds_only_plain_data():
    state = get_rng_state()
    assert set(state) >= {"python", "numpy", "torch"}
    assert state["python"]["state"].dtype == torch.int64  # one tensor, not 625 ints to pickle
    assert state["numpy"]["keys"].dtype == torch.int64
    assert ("cuda" in state) == torch.cuda.is_available()


def test_rng_state_from_an_older_checkpoint_with_a_list_still_loads():
    state = get_rng_state()
    expected = _draw()
    state["python"]["state"] = state["python"]["state"].tolist()
    set_rng_state(state)
    assert _draw() == expected


def test_bad_rng_state_is_rejected():
    with pytest.raises(
        CheckpointError, match="Unknown RNG state part 'pyhton'.*Did you mean 'python'"
    ):
        set_rng_state({"pyhton": {}})
    with pytest.raises(CheckpointError, match="malformed"):
        set_rng_state({"numpy": {"keys": torch.zeros(3)}})
