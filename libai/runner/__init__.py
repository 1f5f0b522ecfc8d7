"""The Runner: builds a run from a config and drives train / val / test."""

from libai.utils.torch_version import check_torch

# before the runner's imports: a torch older than libai's minimum is refused here with a message
# naming both versions, not later on a missing name
check_torch()

from .runner import Runner  # noqa: E402

__all__ = ["Runner"]
