"""Sharded checkpoints: the model and optimizer state of an FSDP2 / tensor-parallel run, written by
every rank through ``torch.distributed.checkpoint`` (DCP); no rank gathers the whole model.

A sharded checkpoint ``iter_N.pth`` is two things:

- ``iter_N.dcp/``: DCP's folder (one ``.distcp`` file per rank and ``.metadata``) with the model
  state, the optimizer state (keyed by parameter name) and, inside an accumulation window, the
  gradients summed so far. It is written as ``iter_N.dcp.tmp/`` and renamed when every rank has
  finished, so a folder under the final name is always complete.
- ``iter_N.pth``: the usual single file with its manifest (loop position, RNG states, schedulers,
  hooks, config), written by rank 0 after the rename. It lists the folder's files and sizes. Until
  it and its manifest exist the checkpoint counts as unfinished, so ``latest_checkpoint``, resume and
  rotation need nothing new.

Loading goes through DCP too, which reshards: a checkpoint saved by 4 processes loads into 2, or
into one process without any parallelism.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from libai.utils.dist import is_sharded
from libai.utils.errors import CheckpointError

from ._fs import fsync_dir

__all__ = ["SHARDED_SUFFIX", "PendingShards", "is_sharded_model", "sharded_folder",
           "save_sharded", "check_sharded", "load_sharded", "load_full_into_sharded", "save_weights_sharded",
           "group_settings", "restore_group_settings", "read_sharded_weights"]

SHARDED_SUFFIX = ".dcp"


def is_sharded_model(model: nn.Module) -> bool:
    """True when some parameter is a DTensor (FSDP2 or tensor parallel)."""
    return is_sharded(model)


def sharded_folder(path: str | os.PathLike) -> Path:
    """The DCP folder of checkpoint ``path`` (``iter_N.pth`` -> ``iter_N.dcp``)."""
    path = Path(path)
    return path.with_name(path.stem + SHARDED_SUFFIX)


def _states(model: nn.Module, optimizer: torch.optim.Optimizer | None,
            with_grads: bool) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    state: dict[str, Any] = {"model": get_model_state_dict(model)}
    if optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(model, optimizer)
    if with_grads:  # copies: FSDP2's gradients are views that async_save cannot stage
        state["grads"] = {name: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                          for name, p in model.named_parameters() if p.requires_grad}
    return state


def save_sharded(path: str | os.PathLike, model: nn.Module,
                 optimizer: torch.optim.Optimizer | None, with_grads: bool = False,
                 asynchronous: bool = False) -> PendingShards:
    """Write the shards of checkpoint ``path`` (every rank calls this).

    Args:
        path: The checkpoint file (``work_dir/iter_N.pth``); the folder goes next to it.
        model: The sharded model.
        optimizer: Its optimizer, or None.
        with_grads: Save the gradients too (inside an accumulation window).
        asynchronous: Return once the shards are copied to host memory
            (``torch.distributed.checkpoint.async_save``); the files are written by a background
            thread, whose collectives run on a process group of their own, never the training's.

    Returns:
        The save, done or in flight: :meth:`PendingShards.result` waits for it and gives the
        listing that rank 0 puts into ``path``'s state as ``state["sharded"]``.
    """
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    folder = sharded_folder(path)
    tmp = folder.with_name(folder.name + ".tmp")
    main = not dist.is_initialized() or dist.get_rank() == 0
    if main and tmp.exists():
        shutil.rmtree(tmp)  # our own unfinished write from a run that died: never complete
    _barrier()
    state = _states(model, optimizer, with_grads)
    if asynchronous:
        future = dcp.async_save(state, checkpoint_id=str(tmp), process_group=_async_group(),
                                no_dist=not _distributed())
        return PendingShards(future, tmp, with_grads)
    dcp.save(state, checkpoint_id=str(tmp), no_dist=not _distributed())
    _barrier()
    pending = PendingShards(None, tmp, with_grads)
    pending.result()  # rank 0 moves the folder into place
    _barrier()
    return pending


class PendingShards:
    """A sharded save, done or in flight, on one rank (see :func:`save_sharded`)."""

    def __init__(self, future: Any, tmp: Path, with_grads: bool) -> None:
        import torch.distributed as dist

        self._future, self._tmp, self._listing = future, tmp, None
        self._main = not dist.is_initialized() or dist.get_rank() == 0
        self._info = {"folder": tmp.name[:-len(".tmp")], "files": {},
                      "world_size": dist.get_world_size() if dist.is_initialized() else 1,
                      "grads": with_grads}

    def result(self) -> dict:
        """Wait for this rank's writes; then rank 0 renames the folder from ``*.tmp`` to its
        final name. Returns the listing for the ``.pth`` file (the files on rank 0 only).

        DCP finishes a save only once every rank's writes are done, and raises its error on
        every rank, so rank 0 needs no further barrier here.
        """
        if self._listing is None:
            if self._future is not None:
                self._future.result()
                self._future = None
            files = {}
            if self._main:
                files = {f.name: f.stat().st_size for f in sorted(self._tmp.iterdir())}
                _move_into_place(self._tmp, self._tmp.with_name(self._info["folder"]))
            self._listing = {**self._info, "files": files}
        return self._listing


def _move_into_place(tmp: Path, folder: Path) -> None:
    if folder.exists():  # the same iteration saved again: the older folder is superseded
        old = folder.with_name(folder.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.rename(folder, old)
        os.rename(tmp, folder)
        shutil.rmtree(old)
    else:
        os.rename(tmp, folder)
    fsync_dir(folder.parent)


_ASYNC_GROUP: tuple[Any, Any] = (None, None)  # (the default group it was made for, the group)


def _async_group() -> Any:
    """A gloo process group for background saves: their collectives must never interleave with
    the training's on the default group (and DCP's async save needs a CPU backend)."""
    global _ASYNC_GROUP
    if not _distributed():
        return None
    import torch.distributed as dist

    default = dist.group.WORLD
    if _ASYNC_GROUP[0] is not default:
        _ASYNC_GROUP = (default, dist.new_group(backend="gloo"))
    return _ASYNC_GROUP[1]


def check_sharded(path: str | os.PathLike, listing: dict) -> Path:
    """The DCP folder of checkpoint ``path``, checked against ``listing`` (every file there with
    its size). Raises CheckpointError naming the first missing or short file."""
    folder = Path(path).with_name(listing["folder"])
    if not folder.is_dir():
        raise CheckpointError(
            f"'{path}' is a sharded checkpoint, and its folder '{folder}' is missing. Restore the "
            f"folder, or resume from an earlier checkpoint: --resume PATH.")
    for name, size in listing["files"].items():
        file = folder / name
        actual = file.stat().st_size if file.exists() else None
        if actual != size:
            found = "is missing" if actual is None else f"has {actual} bytes, expected {size}"
            raise CheckpointError(
                f"Sharded checkpoint '{path}': {file.name} in '{folder}' {found} (one rank's "
                f"shard lost or cut short). Restore the file, or resume from an earlier "
                f"checkpoint: --resume PATH.")
    return folder


def load_sharded(path: str | os.PathLike, listing: dict, model: nn.Module,
                 optimizer: torch.optim.Optimizer | None) -> None:
    """Load the shards of checkpoint ``path`` into ``model`` and ``optimizer`` (every rank
    calls this), resharding to the current layout; gradients of an accumulation window too."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    folder = check_sharded(path, listing)
    state = _states(model, optimizer, listing.get("grads", False))
    # The groups as this process holds them. DCP keeps one copy of each non-tensor value, so
    # the groups it loads are one rank's: under a pipeline another stage's parameter names
    # (a stateless SGD then fails on the group sizes). The settings come from the .pth file
    # (restore_group_settings), the per-parameter state by name from the shards.
    own_groups = [] if optimizer is None else [
        {**g, "params": list(g["params"])} for g in state["optimizer"]["param_groups"]]
    try:
        with _single_process_is_meant():
            dcp.load(state, checkpoint_id=str(folder), no_dist=not _distributed())
    except Exception as e:  # DCP wraps the rank's error in its own CheckpointException
        raise CheckpointError(f"Cannot load the shards in '{folder}': {e}") from e
    set_model_state_dict(model, state["model"])
    if optimizer is not None:
        state["optimizer"]["param_groups"] = own_groups
        set_optimizer_state_dict(model, optimizer, state["optimizer"])
    if "grads" in state:
        params = dict(model.named_parameters())
        for name, grad in state["grads"].items():
            params[name].grad = grad


def load_full_into_sharded(model: nn.Module, weights: dict, strict: bool = True,
                           elsewhere: tuple[str, ...] = ()) -> str:
    """Whole tensors (a one-process checkpoint, ``load_from``) into a sharded model: each rank
    keeps its part (a pipeline stage's process, the weights of its stages: the modules of the
    others, ``elsewhere``: the run's ``execution.elsewhere``). Returns a line for the log."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    from .model_state import strip_prefixes

    weights = strip_prefixes(weights)
    if elsewhere:  # a pipeline stage's part: the other stages' weights are not for it
        weights = {k: v for k, v in weights.items()
                   if not any(k.startswith(path + ".") for path in elsewhere)}
    result = set_model_state_dict(model, weights,
                                  options=StateDictOptions(full_state_dict=True, strict=strict))
    missing, unexpected = result
    return (f"missing keys: {list(missing)}; unexpected keys: {list(unexpected)}"
            if missing or unexpected else "")


def read_sharded_weights(path: str | os.PathLike, listing: dict) -> dict[str, torch.Tensor]:
    """The model weights of sharded checkpoint ``path`` as whole tensors, read in this one
    process from every rank's shards (``listing``: the checkpoint's ``"sharded"`` entry), for a
    reader without the training's layout (``convert_checkpoint.py sharded2file``, generate)."""
    import tempfile

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    folder = check_sharded(path, listing)
    with tempfile.TemporaryDirectory() as tmp:  # DCP's own one-process reader: whole tensors
        with _single_process_is_meant():
            dcp_to_torch_save(str(folder), os.path.join(tmp, "full.pt"))
        return torch.load(os.path.join(tmp, "full.pt"), weights_only=True)["model"]


def save_weights_sharded(weights: dict, path: str | os.PathLike) -> dict:
    """Write whole ``weights`` as a sharded checkpoint's folder next to ``path`` in this one
    process (tools/convert_checkpoint.py); returns the listing for ``path``'s state."""
    import torch.distributed.checkpoint as dcp

    folder = sharded_folder(path)
    if folder.exists():
        raise CheckpointError(f"'{folder}' exists already; choose another output name.")
    tmp = folder.with_name(folder.name + ".tmp")
    with _single_process_is_meant():
        dcp.save({"model": weights}, checkpoint_id=str(tmp), no_dist=True)
    listing = {f.name: f.stat().st_size for f in sorted(tmp.iterdir())}
    os.rename(tmp, folder)
    fsync_dir(folder.parent)
    return {"folder": folder.name, "files": listing, "world_size": 1, "grads": False}


def group_settings(optimizer: torch.optim.Optimizer,
                   model: nn.Module | None = None) -> list[dict[str, Any]]:
    """Each parameter group's settings (lr, initial_lr, betas, ...) as plain numbers, with the
    names of its parameters in ``model`` under ``"names"`` (when given) instead of the
    parameters. The sharded optimizer state does not keep all of them (``initial_lr``, which
    the schedulers start from, goes missing), so the checkpoint file carries them: the groups
    of every rank, since pipeline stages have groups of their own."""
    names = {} if model is None else {id(p): n for n, p in model.named_parameters()}
    groups = []
    for g in optimizer.param_groups:
        settings = {k: float(v) if isinstance(v, torch.Tensor) else v for k, v in g.items()
                    if k != "params"}
        if model is not None:
            settings["names"] = [names[id(p)] for p in g["params"] if id(p) in names]
        groups.append(settings)
    return groups


def restore_group_settings(optimizer: torch.optim.Optimizer, saved: list[dict],
                           model: nn.Module | None = None) -> None:
    """Put :func:`group_settings` back, after :func:`load_sharded`: each group takes the
    settings of the saved group (of any rank) that holds its parameters, by name, so that a
    stage's groups find theirs under any layout; saved groups without names go by position."""
    names = {} if model is None else {id(p): n for n, p in model.named_parameters()}
    for i, group in enumerate(optimizer.param_groups):
        own = {names[id(p)] for p in group["params"] if id(p) in names}
        settings = next((s for s in saved if own & set(s.get("names", ()))), None)
        if settings is None and i < len(saved) and "names" not in saved[i]:
            settings = saved[i]  # a checkpoint written before the names were kept
        for key, value in (settings or {}).items():
            if key == "names":
                continue
            if isinstance(group.get(key), torch.Tensor):
                group[key].fill_(value)  # a tensor lr (graph mode) stays the same tensor
            else:
                group[key] = value


@contextlib.contextmanager
def _single_process_is_meant() -> Iterator[None]:
    """DCP warns that it "assumes" one process when there is no process group: it is meant."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _barrier() -> None:
    if _distributed():
        torch.distributed.barrier()
