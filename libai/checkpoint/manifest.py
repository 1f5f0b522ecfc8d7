"""The manifest written next to every checkpoint, and the checks made against it.

``<name>.manifest.json`` is written (atomically) only after ``<name>`` is complete and on disk, so
a checkpoint without a valid manifest is treated as unfinished. The manifest records the file's
size and sha256 and carries its own checksum, which catches a manifest edited by hand or damaged
on disk. It protects against accidents (crashes, truncation, bit rot, copies gone wrong), not
against someone who rewrites both files on purpose; :func:`~libai.checkpoint.load_checkpoint`
stays safe in that case because it never runs code from a file.

A file that is not a complete checkpoint is never written over: :func:`move_aside` renames it
(and its manifest) to ``<name>.damaged``.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from libai.utils.errors import CheckpointError
from libai.version import __version__ as libai_version

from ._fs import WriteResult, atomic_write, describe_os_error

__all__ = [
    "MANIFEST_SUFFIX",
    "manifest_path",
    "write_manifest",
    "read_manifest",
    "verify_checkpoint",
    "is_complete",
    "file_sha256",
    "move_aside",
    "CHECKPOINT_SUFFIXES",
    "DAMAGED_SUFFIX",
]

MANIFEST_SUFFIX = ".manifest.json"
CHECKPOINT_SUFFIXES = (".pth", ".pt", ".ckpt")  # what counts as a checkpoint file
DAMAGED_SUFFIX = ".damaged"  # a file set aside, every byte kept
_FORMAT = "libai-checkpoint"
_FORMAT_VERSION = 1
_REWRITE_HINT = (
    "Use another checkpoint, or load this one with verify=False if you trust the file itself."
)
_REQUIRED = ("format", "format_version", "file", "size", "sha256", "created_unix", "complete")


def manifest_path(path: str | os.PathLike) -> Path:
    """The manifest file that belongs to checkpoint ``path`` (``<path>.manifest.json``)."""
    path = Path(path)
    return path.with_name(path.name + MANIFEST_SUFFIX)


def file_sha256(path: str | os.PathLike, chunk_bytes: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks of ``chunk_bytes``. Defaults to 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def _self_checksum(fields: dict[str, Any]) -> str:
    body = {k: v for k, v in fields.items() if k != "manifest_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def write_manifest(path: str | os.PathLike, written: WriteResult) -> dict[str, Any]:
    """Atomically write the manifest of the checkpoint at ``path``.

    Args:
        path: The checkpoint file, already complete on disk.
        written: Its size and sha256, as returned by the write.

    Returns:
        The manifest fields.
    """
    path = Path(path)
    now = time.time()
    fields: dict[str, Any] = {
        "format": _FORMAT,
        "format_version": _FORMAT_VERSION,
        "file": path.name,
        "size": written.size,
        "sha256": written.sha256,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "created_unix": now,
        "libai_version": libai_version,
        "torch_version": torch.__version__,
        "complete": True,
    }
    fields["manifest_sha256"] = _self_checksum(fields)
    text = json.dumps(fields, indent=2, sort_keys=True) + "\n"
    atomic_write(manifest_path(path), lambda f: f.write(text.encode("utf-8")))
    return fields


def read_manifest(path: str | os.PathLike) -> dict[str, Any] | None:
    """Read and check the manifest of checkpoint ``path``.

    Args:
        path: The checkpoint file (not the manifest).

    Returns:
        The manifest fields, or None when the checkpoint has no manifest.

    Raises:
        CheckpointError: The manifest is not valid JSON, lacks fields, is of another format,
            is not marked complete, or its own checksum does not match (it was edited or damaged).
            Its ``file`` may name the checkpoint before a rename (see :func:`verify_checkpoint`).
    """
    mpath = manifest_path(path)
    try:
        text = mpath.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"Cannot read manifest '{mpath}': {e}") from e
    bad = f"Manifest '{mpath}' is damaged or was edited"
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{bad}: it is not valid JSON ({e}). {_REWRITE_HINT}") from e
    if not isinstance(fields, dict):
        raise CheckpointError(f"{bad}: it holds a {type(fields).__name__}, not an object.")
    missing = [k for k in _REQUIRED if k not in fields]
    if missing:
        raise CheckpointError(f"{bad}: fields {missing} are missing. {_REWRITE_HINT}")
    if fields.get("manifest_sha256") != _self_checksum(fields):
        raise CheckpointError(
            f"{bad}: its manifest_sha256 does not match its content. {_REWRITE_HINT}"
        )
    if fields["format"] != _FORMAT:
        raise CheckpointError(
            f"{bad}: it describes format={fields['format']!r}, expected format={_FORMAT!r}."
        )
    # fields["file"] may differ from the name: a checkpoint renamed with its manifest stays
    # intact, and verify_checkpoint then compares the sha256 (the content binds, not the name)
    if fields["complete"] is not True:
        raise CheckpointError(f"Manifest '{mpath}' does not mark the checkpoint complete.")
    return fields


def verify_checkpoint(path: str | os.PathLike, check_sha256: bool = True) -> dict[str, Any]:
    """Check that ``path`` exists, has a valid manifest and matches it.

    Args:
        path: The checkpoint file.
        check_sha256: Also hash the whole file (reads it once). Defaults to True; with False only
            the size is compared.

    Returns:
        The manifest fields.

    A checkpoint renamed with its manifest (``iter_4.pth`` -> ``best.pth``,
    ``best.pth.manifest.json``) is verified by its sha256 even when ``check_sha256`` is False.

    Raises:
        CheckpointError: The file or its manifest is missing, or they disagree.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"Checkpoint '{path}' does not exist or is not a file.")
    fields = read_manifest(path)
    if fields is None:
        raise CheckpointError(
            f"Checkpoint '{path}' has no manifest ('{manifest_path(path).name}'), so it may be "
            "unfinished (the manifest is written last)."
        )
    renamed = fields["file"] != path.name
    check_sha256 = check_sha256 or renamed  # a renamed file proves itself by its content
    try:
        size = path.stat().st_size
        digest = file_sha256(path) if check_sha256 and size == fields["size"] else None
    except OSError as e:
        raise CheckpointError(f"Cannot read checkpoint '{path}': {e.strerror or e}.") from e
    problems = []
    if size != fields["size"]:
        problems.append(f"size is {size} bytes, manifest says {fields['size']}")
    elif digest is not None:
        if digest != fields["sha256"]:
            problems.append(f"sha256 is {digest[:16]}..., manifest says {fields['sha256'][:16]}...")
    if problems and renamed:
        raise CheckpointError(
            f"Checkpoint '{path}' does not match its manifest, which was written for "
            f"'{fields['file']}' (the name differs): {'; '.join(problems)}. The manifest belongs "
            f"to another file, or the file was modified after it was written; use another "
            f"checkpoint."
        )
    if problems:
        raise CheckpointError(
            f"Checkpoint '{path}' does not match its manifest: {'; '.join(problems)}. The file "
            "was truncated, modified or damaged after it was written; use another checkpoint."
        )
    return fields


def is_complete(path: str | os.PathLike, check_sha256: bool = True) -> bool:
    """True when ``path`` has a valid manifest that it matches (see :func:`verify_checkpoint`).

    Args:
        path: The checkpoint file.
        check_sha256: Also compare the sha256 (reads the whole file). Defaults to True.
    """
    try:
        verify_checkpoint(path, check_sha256=check_sha256)
    except CheckpointError:
        return False
    return True


def _free_name(path: Path) -> Path:
    target = path.with_name(path.name + DAMAGED_SUFFIX)
    n = 1
    while target.exists() or target.is_symlink():
        target = path.with_name(f"{path.name}{DAMAGED_SUFFIX}.{n}")
        n += 1
    return target


def move_aside(path: str | os.PathLike) -> list[Path]:
    """Rename a checkpoint and its manifest to ``<name>.damaged`` (``.damaged.1`` ... when taken),
    keeping every byte; nothing is ever written over. Returns the new paths.

    Raises:
        CheckpointError: A file cannot be renamed (the message names it and the cause).
    """
    moved = []
    for victim in (Path(path), manifest_path(path)):
        if not victim.exists():
            continue
        target = _free_name(victim)
        try:
            os.rename(victim, target)  # within one folder: atomic, the bytes stay where they are
        except OSError as e:
            cause, fix = describe_os_error(e)
            raise CheckpointError(
                f"Cannot rename '{victim}' to '{target.name}': {cause}. {fix}.") from e
        moved.append(target)
    return moved
