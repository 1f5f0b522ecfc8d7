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
from .scheduler import (
    ConstantLR,
    CosineAnnealingLR,
    ExponentialLR,
    LinearLR,
    MultiStepLR,
    OneCycleLR,
    ParamScheduler,
    PolyLR,
    ReduceOnPlateauLR,
    StepLR,
    apply_schedulers,
    build_param_schedulers,
)

__all__ = [
    "OptimWrapper",
    "AmpOptimWrapper",
    "GraphOptimWrapper",
    "Precision",
    "DefaultOptimWrapperConstructor",
    "build_optim_wrapper",
    "TORCH_OPTIMIZERS",
    "ParamScheduler",
    "apply_schedulers",
    "build_param_schedulers",
    "LinearLR",
    "ConstantLR",
    "ExponentialLR",
    "StepLR",
    "MultiStepLR",
    "CosineAnnealingLR",
    "PolyLR",
    "OneCycleLR",
    "ReduceOnPlateauLR",
]
