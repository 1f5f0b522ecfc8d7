"""Choosing hyperparameters: the learning-rate range test (:func:`find_lr`) and Optuna sweeps
(:mod:`libai.tuning.sweep`). ``libai lr-find`` and ``libai sweep`` are parsers around them.

>>> from libai.config import Config
>>> from libai.tuning import find_lr
>>> result = find_lr(Config.fromfile("configs/digits_mlp.py"), num_iters=40)
>>> result["lr"]
"""

from .lr_find import find_lr, lr_at, suggest

__all__ = ["find_lr", "lr_at", "suggest"]
