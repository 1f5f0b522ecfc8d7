"""The Runner: builds a run from a config and drives train / val / test."""

from .runner import Runner

__all__ = ["Runner"]
