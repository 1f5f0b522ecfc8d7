"""The oldest torch libai runs on, and a one-line refusal of an older one.

``requirements/runtime.txt`` asks pip for ``torch>=MIN_TORCH`` rather than one version, so that
installing libai keeps the CUDA build a GPU machine already has (a test holds the two equal);
``requirements/constraints.txt`` pins the release the suite is run on. This check covers the torch
pip did not judge (``pip install --no-deps``, a checkout on ``PYTHONPATH``): without it an older
torch fails later on a missing name. MIN_TORCH is the oldest release whose tests were run and
passed (README.md, "Quick start"): 2.10.0 and 2.11.0 pass the fast tier and tests/parallel; 2.9.1
passes the fast tier but not tests/parallel (its FSDP2 gradients differ from DDP's in the last
bits). Every newer-torch feature libai uses is in 2.10: FSDP2's
``torch.distributed.fsdp.fully_shard``, ``torch.distributed.tensor``,
``torch.distributed.pipelining``, SDPA's ``enable_gqa`` (Llama's grouped-query attention),
``nn.RMSNorm`` and ``torch.amp.GradScaler(device)``.
"""

from __future__ import annotations

import re

from .errors import LibaiError

__all__ = ["MIN_TORCH", "TorchVersionError", "check_torch", "release"]

MIN_TORCH = "2.10"


class TorchVersionError(LibaiError, ImportError):
    """The installed torch is older than :data:`MIN_TORCH`."""


def release(version: str) -> tuple[int, ...]:
    """The release numbers of a torch version: ``(2, 11, 0)`` from ``2.11.0+cu130``.

    Builds and pre-releases count as their release (``2.12.0a0+git1a2b``, the version of a
    vendor's container, is 2.12): they carry its features, and comparing them the way pip does
    would refuse a CUDA build that works. Empty when the text starts with no number.
    """
    m = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def check_torch(version: str | None = None) -> None:
    """Refuse a torch older than :data:`MIN_TORCH` in one line that names the fix.

    Args:
        version: The version to check. Defaults to None (the imported ``torch.__version__``).

    Raises:
        TorchVersionError: The version is older than MIN_TORCH. A version with no release
            number (a build's own naming) passes: it cannot be judged.
    """
    if version is None:
        import torch

        version = str(torch.__version__)
    have = release(version)
    if have and have < release(MIN_TORCH):
        _one_line_if_uncaught()
        raise TorchVersionError(
            f"libai needs torch>={MIN_TORCH}, and torch {version} is installed: install a newer "
            f"build, e.g. pip install 'torch>={MIN_TORCH}' (README.md, Quick start, names the "
            f"index of each CUDA build)"
        )


def _one_line_if_uncaught() -> None:
    """The refusal is raised while libai is imported (a tool imports the runner before its
    ``main`` runs, so the tools' one-line errors do not apply yet): left uncaught, it prints as
    one ``error:`` line instead of an import traceback. Any other exception prints as before."""
    import sys

    previous = sys.excepthook

    def hook(kind: type, value: BaseException, tb: object) -> None:
        if isinstance(value, TorchVersionError):
            print(f"error: {value}", file=sys.stderr)
        else:
            previous(kind, value, tb)

    sys.excepthook = hook
