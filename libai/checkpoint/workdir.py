"""Checkpoints inside a work dir: the ``latest_checkpoint`` pointer, listing, resuming, pruning.

``<work_dir>/latest_checkpoint`` is a one-line text file holding the checkpoint's name relative to
``work_dir``. It is replaced atomically and only after the checkpoint and its manifest are
complete, so it never names an unfinished file. :func:`find_resumable` still checks the file it
names and falls back to the newest checkpoint that verifies, because files can be damaged or
deleted after the fact.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
from pathlib import Path

import torch

from libai.utils import dist
from libai.utils.errors import CheckpointError

from ._fs import atomic_write, describe_os_error
from .manifest import (
    CHECKPOINT_SUFFIXES,
    DAMAGED_SUFFIX,
    is_complete,
    manifest_path,
    move_aside,
    read_manifest,
    verify_checkpoint,
)
from .sharded import sharded_folder

__all__ = [
    "LATEST_NAME",
    "update_latest",
    "read_latest",
    "find_resumable",
    "list_checkpoints",
    "remove_checkpoint",
    "damaged_checkpoints",
    "move_aside",
    "DAMAGED_SUFFIX",
    "keep_other_runs_checkpoint",
    "run_folder_name",
    "series_to_continue",
    "set_damaged_aside",
]

LATEST_NAME = "latest_checkpoint"
_logger = logging.getLogger("libai.checkpoint")


def update_latest(work_dir: str | os.PathLike, ckpt_path: str | os.PathLike) -> Path:
    """Point ``<work_dir>/latest_checkpoint`` at ``ckpt_path`` (atomic replace).

    Args:
        work_dir: The run's work dir.
        ckpt_path: A checkpoint whose manifest has been written.

    Returns:
        The pointer file.

    Raises:
        CheckpointError: ``ckpt_path`` has no valid manifest or does not match its size (the
            pointer must never name an unfinished checkpoint), or the pointer cannot be written.
    """
    work_dir, ckpt_path = Path(work_dir), Path(ckpt_path)
    try:
        verify_checkpoint(ckpt_path, check_sha256=False)
    except CheckpointError as e:
        raise CheckpointError(f"Refusing to point {LATEST_NAME} at '{ckpt_path}': {e}") from e
    rel = os.path.relpath(ckpt_path.resolve(), work_dir.resolve())
    pointer = work_dir / LATEST_NAME
    atomic_write(pointer, lambda f: f.write((rel + "\n").encode("utf-8")))
    return pointer


def read_latest(work_dir: str | os.PathLike) -> Path | None:
    """The checkpoint ``<work_dir>/latest_checkpoint`` names (unchecked), or None without one.

    Raises:
        CheckpointError: The pointer exists but cannot be read or is empty.
    """
    pointer = Path(work_dir) / LATEST_NAME
    try:
        text = pointer.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"Cannot read '{pointer}': {e}") from e
    if not text or "\n" in text:
        raise CheckpointError(f"'{pointer}' is damaged: expected one file name, got {text!r}.")
    return Path(work_dir) / text


def _created(path: Path) -> float:
    try:
        fields = read_manifest(path)
    except CheckpointError:
        fields = None
    if fields is not None and isinstance(fields.get("created_unix"), int | float):
        return float(fields["created_unix"])
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def list_checkpoints(work_dir: str | os.PathLike, complete_only: bool = False) -> list[Path]:
    """Checkpoint files directly inside ``work_dir``, oldest first.

    A checkpoint is a file ending in ``.pth``, ``.pt`` or ``.ckpt`` whose name does not start with
    ``.`` (temp files do). Order is the manifest's creation time, or the file's mtime for files
    without a readable manifest.

    Args:
        work_dir: Folder to scan. A missing folder has no checkpoints.
        complete_only: Keep only checkpoints with a valid manifest and the right size (the sha256
            is not computed here). Defaults to False.

    Returns:
        Paths sorted by creation time, then name.
    """
    folder = Path(work_dir)
    if not folder.is_dir():
        return []
    found = [
        p
        for p in folder.iterdir()
        if p.name.endswith(CHECKPOINT_SUFFIXES) and not p.name.startswith(".") and p.is_file()
    ]
    if complete_only:
        found = [p for p in found if is_complete(p, check_sha256=False)]
    return sorted(found, key=lambda p: (_created(p), p.name))


def find_resumable(
    work_dir: str | os.PathLike, logger: logging.Logger | None = None
) -> Path | None:
    """The checkpoint to resume from: the latest one if it verifies, else the newest that does.

    Latest and newest mean the last written, so ``--resume`` follows the latest run of a work dir
    that saved a checkpoint, not the run that reached the highest iteration
    (tests/tools/test_latest_run.py). The file named by ``latest_checkpoint`` is verified against
    its manifest (size and sha256).
    When it (or the pointer) is missing or damaged, the other checkpoints are tried newest first,
    and a warning names the bad file and the one used instead. Checkpoints without a manifest are
    never chosen: they may be unfinished.

    In a distributed run rank 0 decides and the answer is broadcast, so every rank must call this.
    A checkpoint inside the work dir travels as a path relative to it: nodes that mount the shared
    work dir at different paths each open it under their own (docs/cluster.md).

    Args:
        work_dir: The run's work dir.
        logger: Where the warning goes. Defaults to the ``libai.checkpoint`` logger.

    Returns:
        The checkpoint path, or None when there is nothing to resume from.
    """
    work_dir, choice = Path(work_dir), None
    if dist.is_main_process():
        found = _choose(work_dir, logger or _logger)
        inside = found is not None and not os.path.relpath(found, work_dir).startswith("..")
        choice = os.path.relpath(found, work_dir) if inside else found
    choice = dist.broadcast_object(choice)
    return None if choice is None else work_dir / choice  # an absolute path stays as it is


def _choose(work_dir: Path, logger: logging.Logger) -> Path | None:
    problem = None
    target: Path | None = None
    try:
        target = read_latest(work_dir)
    except CheckpointError as e:
        problem = str(e)
    if target is not None:
        try:
            verify_checkpoint(target)
            return target
        except CheckpointError as e:
            problem = str(e)
    skipped: list[str] = []
    chosen = None
    for path in reversed(list_checkpoints(work_dir)):
        if target is not None and path.resolve() == target.resolve():
            continue
        if is_complete(path):
            chosen = path
            break
        skipped.append(path.name)
    if problem is None and chosen is None and not skipped:
        return None
    if problem is None:
        head = f"{work_dir / LATEST_NAME} does not exist"
    elif target is not None:
        head = f"{LATEST_NAME} names '{target}', which cannot be used: {problem}"
    else:
        head = problem
    if skipped:
        head += f" Skipped incomplete or damaged checkpoints: {', '.join(skipped)}."
    if chosen is None:
        logger.warning(
            "%s No other complete checkpoint in '%s'; nothing to resume.", head, work_dir
        )
    else:
        logger.warning("%s Resuming from '%s' instead.", head, chosen)
    return chosen


def remove_checkpoint(path: str | os.PathLike) -> None:
    """Delete a checkpoint and its manifest; a file that is already gone is not an error.

    Only a complete checkpoint (its manifest valid and its size right) is deleted: one that is
    not is evidence, and is moved aside to ``<name>.damaged`` instead (see :func:`move_aside`).
    The manifest goes first, so an interrupted removal leaves a file that counts as unfinished
    rather than one that looks complete.

    Raises:
        CheckpointError: A file exists but cannot be deleted.
    """
    path = Path(path)
    if path.exists() and not is_complete(path, check_sha256=False):
        moved = move_aside(path)
        _logger.warning("Not deleting '%s': it is not a complete checkpoint. Moved it to '%s'.",
                        path, moved[0])
        return
    for victim in (manifest_path(path), path):
        try:
            victim.unlink(missing_ok=True)
        except OSError as e:
            cause, _ = describe_os_error(e)
            raise CheckpointError(f"Cannot delete '{victim}': {cause}.") from e
    shards = sharded_folder(path)  # a sharded checkpoint's folder goes with its file
    if shards.is_dir():
        shutil.rmtree(shards)


def damaged_checkpoints(work_dir: str | os.PathLike) -> list[Path]:
    """Checkpoints in ``work_dir`` that are not complete: no valid manifest, or their size or
    sha256 differs from it (truncated, modified, or never finished). Oldest first."""
    return [p for p in list_checkpoints(work_dir) if not is_complete(p)]


def keep_other_runs_checkpoint(path: str | os.PathLike, run_folder: str | None) -> Path | None:
    """Before a run saves ``path``: a complete checkpoint there written by another run of the
    work dir (``meta["run_folder"]`` differs) is that run's, not superseded by this one. Move it,
    with its manifest and sharded folder, into that run's folder (``work_dir/<run folder>/``) and
    return its new path; None when there is nothing to keep.
    """
    path = Path(path)
    if run_folder is None or not path.is_file() or not is_complete(path, check_sha256=False):
        return None
    try:  # mmap: only the meta is read, not the tensors
        meta = torch.load(path, map_location="cpu", mmap=True, weights_only=True).get("meta", {})
    except (OSError, RuntimeError, pickle.UnpicklingError):  # unreadable: left to the damage checks
        return None
    other = meta.get("run_folder") if isinstance(meta, dict) else None
    if not other or other == run_folder:
        return None
    target = path.parent / other
    target.mkdir(exist_ok=True)
    for victim in (manifest_path(path), sharded_folder(path), path):
        if victim.exists():
            os.rename(victim, _free_name_in(target, victim.name))
    _logger.warning("'%s' belonged to the earlier run %s: moved it into '%s' (every byte kept) "
                    "before saving this run's checkpoint under its name.", path.name, other, target)
    return target / path.name


def run_folder_name(work_dir: str, series_dir: str | None) -> str | None:
    """The name of the run folder holding a training's scalar series (``series_dir``), for the
    checkpoint's meta; None for a folder outside ``work_dir`` (a dry run's temporary one)."""
    if series_dir is None or os.path.dirname(os.path.abspath(series_dir)) != work_dir:
        return None
    return os.path.basename(series_dir)


def series_to_continue(work_dir: str, name: object) -> str | None:
    """After a resume, the folder of the checkpoint's scalar series (its meta's ``run_folder``)
    when it is in this work dir; None: this run's own folder starts a series whose steps
    continue from the checkpoint's."""
    from libai.utils.run_layout import RUN_FOLDER

    if not isinstance(name, str) or not RUN_FOLDER.match(name):
        return None
    folder = os.path.join(work_dir, name)
    return folder if os.path.isdir(folder) else None


def _free_name_in(folder: Path, name: str) -> Path:
    target, n = folder / name, 1
    while target.exists():
        target, n = folder / f"{name}.{n}", n + 1
    return target


def set_damaged_aside(work_dir: str, policy: str, logger: logging.Logger) -> None:
    """``--resume`` found nothing to resume from, but damaged checkpoints are there: stop, naming
    them, unless ``policy`` is ``'rename'`` (``resume_options.damaged``, ``--move-damaged``):
    then move them aside to ``*.damaged`` first. Training over them would overwrite bytes the
    user may recover. Files without a manifest (a save cut short, e.g. by kill -9) are moved aside
    without asking: they never were complete, and a restarted worker must be able to start fresh.
    Every rank calls this."""
    found = None
    if dist.is_main_process():
        found = [(str(p), manifest_path(p).exists()) for p in damaged_checkpoints(work_dir)]
    found = dist.broadcast_object(found)
    if not found:
        return
    names = ", ".join(os.path.basename(p) for p, _ in found)
    damaged = any(has_manifest for _, has_manifest in found)
    if damaged and policy != "rename":
        raise CheckpointError(
            f"--resume: the only checkpoints in {work_dir} are damaged or incomplete ({names}); "
            f"nothing was changed. Move them aside yourself, or pass --move-damaged "
            f"(resume_options=dict(damaged='rename')) to rename them to *.damaged, keeping every "
            f"byte, and start fresh.")
    if dist.is_main_process():
        for path, _ in found:
            move_aside(path)
    dist.barrier()
    what = "damaged" if damaged else "unfinished (no manifest: a save was cut short)"
    logger.warning(f"resume: moved the {what} checkpoint(s) {names} to *.damaged, every byte kept.")
