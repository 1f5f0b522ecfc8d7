"""Tiny parts for tests, yours included: a runner in three lines. See docs/data.md.

::

    from libai import Runner
    from libai.testing import toy_config
    runner = Runner.from_cfg(toy_config(work_dir=str(tmp_path)))

Importing this package registers ``ToyDataset`` in ``DATASETS`` and ``ToyModel`` and
``DigitsMLP`` in ``MODELS``.
"""

from .config import RUNNER_KEYS, toy_config
from .datasets import ToyDataset
from .models import DigitsMLP, ToyModel

__all__ = ["DigitsMLP", "RUNNER_KEYS", "ToyDataset", "ToyModel", "toy_config"]
