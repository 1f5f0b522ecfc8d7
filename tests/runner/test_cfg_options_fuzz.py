"""Random ``--cfg-options`` never produce a traceback: they merge and build, or they are refused
with libai's one-line error (issue 17). Runs what ``tools/train.py`` runs up to the first step:
merging the options, building the runner and every part of a run."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libai.config import Config
from libai.runner import Runner
from libai.utils.errors import LibaiError

DIGITS = Config.fromfile(Path(__file__).resolve().parents[2] / "configs/digits_mlp.py")


def _keys(node, path=""):
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _keys(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list) and any(isinstance(v, dict) for v in node):
        for i, v in enumerate(node):
            yield from _keys(v, f"{path}.{i}")
    else:
        yield path


KEYS = sorted(k for k in _keys(DIGITS.to_dict()) if k != "work_dir")
# Values as a user might type them: literals of every kind, words, and plain noise.
VALUES = st.one_of(
    st.sampled_from(["None", "True", "-1", "0", "1e-3", "[]", "{}", "()", "[1, 2]", "'x'",
                     "{'type': 'X'}", "nan", "inf", "-inf", "1e400", "auto", "9" * 30]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True).map(repr),
    st.text(max_size=12),
)
OPTION = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), VALUES),
    st.builds(lambda k, v: f"+{k}={v}", st.sampled_from(KEYS + ["new", "model.new"]), VALUES),
    st.text(max_size=20),  # anything at all, '=' or not
)


HUGE = 2**22  # elements: 16 MB of float32


@contextlib.contextmanager
def huge_weights_left_unfilled():
    """A drawn size can make a valid model of gigabytes (``model.in_features=8817252``: a 4.5 GB
    layer, 20 s to fill with random numbers, which then sit in memory). What the weights hold
    plays no part in building a run, so a tensor of more than HUGE elements is left as
    allocated (its pages untouched); every other one is initialised as torch does."""
    fills = {name: getattr(torch.nn.init, name) for name in ("kaiming_uniform_", "uniform_")}

    def unless_huge(fill):
        return lambda tensor, *a, **k: tensor if tensor.numel() > HUGE else fill(tensor, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        for name, fill in fills.items():
            mp.setattr(torch.nn.init, name, unless_huge(fill))
        yield


def _merge(options: list[str]) -> Config | None:
    cfg = DIGITS.copy()
    try:
        cfg.merge_from_options(options)
    except LibaiError:
        return None
    return cfg


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(OPTION, min_size=1, max_size=3))
def test_random_options_merge_or_are_refused(options):
    _merge(options)  # anything but a LibaiError fails the test


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(option=st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), VALUES))
def test_random_values_build_a_run_or_are_refused(option, tmp_path):
    cfg = _merge([option, "train_cfg.max_iters=2"])
    if cfg is None:
        return
    cfg.work_dir = str(tmp_path / "work")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with huge_weights_left_unfilled():
            runner = Runner.from_cfg(cfg, fast_dev_run=1)
            runner.train_loop, runner.optim_wrapper, runner.param_schedulers  # noqa: B018
            runner.val_loop, runner.test_loop  # noqa: B018 - each built as train() would
    except LibaiError:
        pass
    finally:
        torch.set_num_threads(threads)
        logger = logging.getLogger("libai")
        for handler in [h for h in logger.handlers if isinstance(h, logging.FileHandler)]:
            logger.removeHandler(handler)
            handler.close()
