"""``toy_config``: the smallest complete runner config, for tests of hooks, loops and the runner.

::

    from libai import Runner
    from libai.testing import toy_config

    Runner.from_cfg(toy_config(work_dir=str(tmp_path))).train()
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["toy_config"]

def _base() -> dict[str, Any]:
    return dict(
        model=dict(type="ToyModel", in_features=8, num_classes=2),
        work_dir="work_dirs/toy",
        train_dataloader=dict(
            dataset=dict(type="ToyDataset", num_samples=64, seed=0),
            sampler=dict(type="DefaultSampler", shuffle=True),
            batch_size=8,
            num_workers=0,
        ),
        val_dataloader=dict(
            dataset=dict(type="ToyDataset", num_samples=32, seed=0),
            sampler=dict(type="DefaultSampler", shuffle=False),
            batch_size=8,
            num_workers=0,
        ),
        train_cfg=dict(type="IterBasedTrainLoop", max_iters=20, val_interval=10),
        val_cfg=dict(type="ValLoop"),
        optim_wrapper=dict(type="OptimWrapper", optimizer=dict(type="SGD", lr=0.1)),
        val_evaluator=dict(type="Accuracy"),
        randomness=dict(seed=0),
    )


def toy_config(**overrides: Any) -> dict[str, Any]:
    """A fresh runner config dict: ToyModel on ToyDataset, 20 iterations, validation every 10.

    Overrides apply per top-level key, one level deep. A dict given for a key whose default is a dict updates
    that default (``train_cfg=dict(max_iters=5)`` keeps the loop type and ``val_interval``),
    unless it names a different ``type``: then it replaces the default whole. Any other value,
    ``None`` included, replaces the default (``val_dataloader=None`` turns validation off;
    pair it with ``val_cfg=None, val_evaluator=None``).

    Args:
        **overrides: Top-level runner config keys; the Runner rejects unknown ones.

    Returns:
        A new dict each call; editing it does not affect later calls.
    """
    cfg = _base()
    for key, value in overrides.items():
        default = cfg.get(key)
        value = copy.deepcopy(value)
        same_type = isinstance(value, dict) and value.get("type", None) in (None, _type(default))
        if isinstance(default, dict) and same_type:
            cfg[key] = {**default, **value}
        else:
            cfg[key] = value
    return cfg


def _type(cfg: Any) -> Any:
    return cfg.get("type") if isinstance(cfg, dict) else None
