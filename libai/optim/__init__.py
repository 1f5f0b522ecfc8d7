"""Optimizers, optimizer wrappers and parameter schedulers. See docs/optim_wrappers.md.

Importing this package registers every ``torch.optim`` optimizer in OPTIMIZERS, the wrappers in
OPTIM_WRAPPERS, the default constructor in OPTIM_WRAPPER_CONSTRUCTORS and the schedulers in
PARAM_SCHEDULERS.
"""

from .amp_optim_wrapper import AmpOptimWrapper
from .constructor import DefaultOptimWrapperConstructor, build_optim_wrapper
from .graph_optim_wrapper import GraphOptimWrapper
from .optim_wrapper import OptimWrapper
from .optimizers import TORCH_OPTIMIZERS
from .precision import Precision
from .scheduler import *  # noqa: F403  (the schedulers, listed once in scheduler/__init__.py)
from .scheduler import __all__ as _SCHEDULERS

__all__ = [
    "OptimWrapper",
    "AmpOptimWrapper",
    "GraphOptimWrapper",
    "Precision",
    "DefaultOptimWrapperConstructor",
    "build_optim_wrapper",
    "TORCH_OPTIMIZERS",
    *_SCHEDULERS,
]
