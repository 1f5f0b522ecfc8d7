"""Typed errors that carry the context a user needs to fix the problem.

Every error raised for bad *user input* (a config, a registry name, a checkpoint) derives from
:class:`LibaiError`. Command-line tools print such an error as one short message and exit 2;
``--debug`` shows the traceback. Internal invariants use ``assert``.
"""

from __future__ import annotations

__all__ = [
    "LibaiError",
    "ConfigError",
    "RegistryError",
    "BuildError",
    "CheckpointError",
    "DataError",
    "TrainingError",
]


class LibaiError(Exception):
    """Base class of the errors libai raises for bad input; the message names the fix."""


class ConfigError(LibaiError):
    """A config file, key or value is wrong (unknown key, base cycle, read-only write...)."""


class RegistryError(LibaiError, KeyError):
    """A ``type`` name is not registered, or a name is registered twice.

    Subclasses ``KeyError`` so that ``except KeyError`` around a lookup keeps working, but
    overrides ``__str__``: ``KeyError`` would print the message wrapped in quotes.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class BuildError(LibaiError):
    """A registered constructor rejected the config it was given."""


class CheckpointError(LibaiError):
    """A checkpoint cannot be written, found, read or matched to the model."""


class DataError(LibaiError):
    """A dataset or data loader cannot be built or iterated as configured."""


class TrainingError(LibaiError):
    """Training cannot go on (for example a non-finite loss under the 'raise' policy)."""
