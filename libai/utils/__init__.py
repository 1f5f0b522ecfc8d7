"""Level-0 utilities: errors, suggestions, distributed helpers, logging. stdlib/torch/numpy only."""

from .errors import (
    BuildError,
    CheckpointError,
    ConfigError,
    DataError,
    LibaiError,
    RegistryError,
    TrainingError,
)
from .suggest import closest, did_you_mean

__all__ = [
    "BuildError",
    "CheckpointError",
    "ConfigError",
    "DataError",
    "LibaiError",
    "RegistryError",
    "TrainingError",
    "closest",
    "did_you_mean",
]
