"""Registries: ``type`` strings to classes. See docs/registry.md."""

from .registry import Registry, build_from_cfg
from .root import (
    COLLATE_FUNCTIONS,
    DATA_SAMPLERS,
    DATASETS,
    EVALUATORS,
    HOOKS,
    LOG_BACKENDS,
    LOOPS,
    METRICS,
    MODELS,
    OPTIM_WRAPPER_CONSTRUCTORS,
    OPTIM_WRAPPERS,
    OPTIMIZERS,
    PARAM_SCHEDULERS,
    RUNNERS,
    TRANSFORMS,
)

__all__ = [
    "Registry",
    "build_from_cfg",
    "COLLATE_FUNCTIONS",
    "DATA_SAMPLERS",
    "DATASETS",
    "EVALUATORS",
    "HOOKS",
    "LOG_BACKENDS",
    "LOOPS",
    "METRICS",
    "MODELS",
    "OPTIM_WRAPPER_CONSTRUCTORS",
    "OPTIM_WRAPPERS",
    "OPTIMIZERS",
    "PARAM_SCHEDULERS",
    "RUNNERS",
    "TRANSFORMS",
]
