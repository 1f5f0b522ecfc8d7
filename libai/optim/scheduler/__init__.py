"""Parameter schedulers: pure functions of the iteration, applied with :func:`apply_schedulers`."""

from .annealing_schedulers import CosineAnnealingLR, OneCycleLR, PolyLR
from .param_scheduler import ParamScheduler, apply_schedulers, build_param_schedulers
from .plateau import ReduceOnPlateauLR
from .step_schedulers import ConstantLR, ExponentialLR, LinearLR, MultiStepLR, StepLR

__all__ = [
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
