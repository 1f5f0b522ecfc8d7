"""Choosing hyperparameters: the learning-rate range test (:func:`find_lr`) and Optuna sweeps
(:mod:`libai.tuning.sweep`). ``libai lr-find`` and ``libai sweep`` are parsers around them.

>>> from libai.config import Config
>>> from libai.tuning import find_lr
>>> result = find_lr(Config.fromfile("configs/digits_mlp.py"), num_iters=40)
>>> result["lr"]
>>> from libai.tuning import run_sweep
>>> run_sweep("configs/sweeps/digits_lr.py", parallel=2)   # 0, or 130 if interrupted
"""

from .lr_find import find_lr, lr_at, suggest
from .sweep import Sweep, run_sweep

__all__ = ["Sweep", "find_lr", "lr_at", "run_sweep", "suggest"]
