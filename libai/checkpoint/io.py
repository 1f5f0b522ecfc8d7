"""Save and load one checkpoint file: atomic writes, a manifest, and safe reads only.

Example::

    save_checkpoint({"model": model_state_for_saving(model), "iter": 100}, "work/iter_100.pth")
    state = load_checkpoint("work/iter_100.pth")        # verified against its manifest
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from libai.utils.errors import CheckpointError
from libai.utils.suggest import did_you_mean

from ._fs import atomic_write, describe_os_error
from .manifest import (
    CHECKPOINT_SUFFIXES,
    MANIFEST_SUFFIX,
    is_complete,
    manifest_path,
    move_aside,
    verify_checkpoint,
    write_manifest,
)
from .state import check_state

__all__ = ["save_checkpoint", "load_checkpoint", "CHECKPOINT_SUFFIXES"]

#: File name endings that :func:`~libai.checkpoint.list_checkpoints` treats as checkpoints.

_ZIP_MAGIC = b"PK\x03\x04"
_PICKLE_PROTO = 0x80


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike) -> dict[str, Any]:
    """Write ``state`` to ``path`` atomically and durably, then its manifest.

    The content is checked first (see :func:`~libai.checkpoint.state.check_state`). The file is
    written as ``.<name>.tmp-<pid>`` in the same folder, fsynced, renamed to ``<name>`` and the
    folder fsynced; then ``<name>.manifest.json`` (size, sha256, versions, time, ``complete``) is
    written the same way. Until the manifest exists the checkpoint counts as unfinished. A missing
    folder is created.

    Args:
        state: Tensors, numbers, strings, bytes, bools, None and lists/tuples/dicts of them.
        path: Destination file. An existing file there is replaced only once the new one is
            complete.

    Returns:
        The manifest fields (``size``, ``sha256``, ``created`` ...).

    Raises:
        CheckpointError: The content has an unsupported entry (named by key path), or the write
            failed (the message names the path, the cause and the fix; nothing else was changed).
    """
    return write_checked_state(check_state(state), path)


def write_checked_state(state: dict[str, Any], path: str | os.PathLike) -> dict[str, Any]:
    """Write an already checked state (see :func:`save_checkpoint`); used by the async saver."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"Cannot save checkpoint to '{path}': it is a folder.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        cause, fix = describe_os_error(e)
        raise CheckpointError(f"Could not write '{path}': {cause}. {fix}.") from e

    _keep_foreign_file(path)

    def drop_old_manifest() -> None:
        # The old manifest must not vouch for the new bytes. It goes only once the new file is
        # durable, so a failed write leaves an earlier checkpoint at this path complete.
        manifest_path(path).unlink(missing_ok=True)

    written = atomic_write(path, lambda f: torch.save(state, f), before_replace=drop_old_manifest)
    try:
        return write_manifest(path, written)
    except CheckpointError as e:
        raise CheckpointError(
            f"Checkpoint '{path}' was written but its manifest was not, so it counts as "
            f"incomplete and will not be resumed from. {e}"
        ) from e


def _keep_foreign_file(path: Path) -> None:
    """A file already at ``path`` that is not a complete checkpoint (damaged, unfinished, or not
    libai's) is evidence: move it aside to ``<name>.damaged`` before writing, never over it."""
    if not path.is_file() or is_complete(path, check_sha256=False):
        return
    moved = move_aside(path)
    logging.getLogger("libai.checkpoint").warning(
        f"'{path}' was not a complete checkpoint; it was moved to '{moved[0].name}' (every byte "
        f"kept) before saving a new one under its name.")


def load_checkpoint(
    path: str | os.PathLike,
    map_location: str | torch.device | None = "cpu",
    verify: bool = True,
) -> dict[str, Any]:
    """Read a checkpoint without ever running code stored in it.

    Only tensors, numbers, strings and containers are unpickled (``torch.load`` with
    ``weights_only=True``); a file that needs anything else is refused.

    Args:
        path: The checkpoint file.
        map_location: Where tensors are placed, as in ``torch.load``. Defaults to "cpu".
        verify: When a manifest exists, compare size and sha256 with it first (reads the file one
            extra time). Files without a manifest (e.g. downloaded weights) load unverified.
            Defaults to True.

    Returns:
        The saved dict.

    Raises:
        CheckpointError: The file is missing (close names are suggested), truncated, corrupt, not
            a PyTorch checkpoint, holds unsafe content, or does not match its manifest.
    """
    path = Path(path)
    if not path.is_file():
        raise _missing_error(path)
    if verify and manifest_path(path).exists():
        verify_checkpoint(path)
    header = _read_header(path)
    try:
        with warnings.catch_warnings():
            # Files written by other tools may use a newer pickle protocol; that is harmless.
            warnings.filterwarnings("ignore", message=".*pickle protocol.*")
            state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:
        raise _load_error(path, header, e) from e
    if not isinstance(state, dict):
        raise CheckpointError(
            f"'{path}' holds a {type(state).__name__}, not a dict: it is not a libai checkpoint."
        )
    return state


def _read_header(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            header = f.read(8)
    except OSError as e:
        raise CheckpointError(f"Cannot read checkpoint '{path}': {e.strerror or e}.") from e
    if not header:
        raise CheckpointError(
            f"Checkpoint '{path}' is empty (0 bytes): it is truncated, probably by an interrupted "
            "write. Use another checkpoint."
        )
    is_zip = header.startswith(_ZIP_MAGIC)
    is_pickle = header[0] == _PICKLE_PROTO and len(header) > 1 and 2 <= header[1] <= 5
    if not (is_zip or is_pickle):
        raise CheckpointError(
            f"'{path}' is not a PyTorch checkpoint (it starts with {header[:8]!r}): the file is "
            "truncated, corrupt or of another type. Use another checkpoint."
        )
    return header


def _load_error(path: Path, header: bytes, e: Exception) -> CheckpointError:
    # The unpickler refuses what weights_only does not allow; for a file whose container parsed,
    # that means the payload asked for code (a class, a function), not that bytes are missing.
    if isinstance(e, pickle.UnpicklingError):
        found = re.search(r"(Trying to load unsupported[^\n]*|Unsupported[^\n]*)", str(e))
        reason = found.group(1).strip() if found else str(e).strip().splitlines()[0][:200]
        return CheckpointError(
            f"'{path}' is not a libai checkpoint or holds unsafe content; refusing to unpickle it "
            f"({reason}). libai loads only tensors, numbers, strings and containers. If the file "
            "is corrupt, use another checkpoint; if it comes from a trusted program that stores "
            "objects, convert it there to plain state dicts."
        )
    kind = "zip container" if header.startswith(_ZIP_MAGIC) else "pickle stream"
    first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
    detail = first_line.split(". ")[0][:200] or type(e).__name__
    return CheckpointError(
        f"Checkpoint '{path}' is truncated or corrupt: its {kind} cannot be read "
        f"({type(e).__name__}: {detail}). Use another checkpoint."
    )


def _missing_error(path: Path) -> CheckpointError:
    folder = path.parent
    msg = f"Checkpoint '{path}' does not exist."
    if not folder.is_dir():
        return CheckpointError(f"{msg} Its folder '{folder}' does not exist either.")
    if path.exists():
        return CheckpointError(f"Checkpoint '{path}' is not a file.")
    names = sorted(
        p.name
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".") and not p.name.endswith(MANIFEST_SUFFIX)
    )
    hint = did_you_mean(path.name, names)
    if not hint:
        ckpts = [n for n in names if n.endswith(CHECKPOINT_SUFFIXES)]
        if ckpts:
            shown = ", ".join(ckpts[-5:])
            hint = f" Checkpoints in '{folder}': {shown}" + (" ..." if len(ckpts) > 5 else "")
        else:
            hint = f" '{folder}' holds no checkpoint files."
    return CheckpointError(msg + hint)
