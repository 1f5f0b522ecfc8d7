"""The engine's root registries. A downstream project may make children of them.

Each registry lists the libai modules that register its built-in entries; they are imported on
the first lookup miss, so ``MODELS.build(dict(type="DigitsMLP"))`` works without importing
``libai.model`` first.
"""

from __future__ import annotations

from .registry import Registry

__all__ = [
    "MODELS",
    "DATASETS",
    "TRANSFORMS",
    "DATA_SAMPLERS",
    "COLLATE_FUNCTIONS",
    "OPTIMIZERS",
    "OPTIM_WRAPPERS",
    "OPTIM_WRAPPER_CONSTRUCTORS",
    "PARAM_SCHEDULERS",
    "HOOKS",
    "LOOPS",
    "RUNNERS",
    "METRICS",
    "EVALUATORS",
    "LOG_BACKENDS",
]

MODELS = Registry("model", locations=["libai.model", "libai.testing"])
DATASETS = Registry("dataset", locations=["libai.data", "libai.testing"])
TRANSFORMS = Registry("transform", locations=["libai.data"])
DATA_SAMPLERS = Registry("data_sampler", locations=["libai.data"])
COLLATE_FUNCTIONS = Registry("collate_function", locations=["libai.data"])
OPTIMIZERS = Registry("optimizer", locations=["libai.optim"])
OPTIM_WRAPPERS = Registry("optim_wrapper", locations=["libai.optim"])
OPTIM_WRAPPER_CONSTRUCTORS = Registry("optim_wrapper_constructor", locations=["libai.optim"])
PARAM_SCHEDULERS = Registry("param_scheduler", locations=["libai.optim"])
HOOKS = Registry("hook", locations=["libai.hooks"])
LOOPS = Registry("loop", locations=["libai.loops"])
RUNNERS = Registry("runner", locations=["libai.runner"])
METRICS = Registry("metric", locations=["libai.evaluator"])
EVALUATORS = Registry("evaluator", locations=["libai.evaluator"])
LOG_BACKENDS = Registry("log_backend", locations=["libai.visualization"])
