"""Tiny parts for tests, yours included: a runner in three lines. See docs/data.md.

::

    from libai import Runner
    from libai.testing import toy_config
    runner = Runner.from_cfg(toy_config(work_dir=str(tmp_path)))

Importing this package registers ``ToyDataset`` in ``DATASETS`` and ``ToyModel`` in
``MODELS``.
"""

from .config import toy_config
from .datasets import ToyDataset
from .models import ToyModel

__all__ = ["ToyDataset", "ToyModel", "toy_config"]
