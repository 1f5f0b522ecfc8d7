"""Process environment for a run: distributed init, device, seeds, work dir, logger, the saved
config, and the summaries at the top of the log."""

from __future__ import annotations

import logging
import os
import platform
import random
import shutil
import sys
import time
from typing import Any

import numpy as np
import torch

from libai.runner import slurm
from libai.utils import dist
from libai.utils.errors import ConfigError
from libai.utils.run_lock import WorkDirLock, acquire
from libai.utils.suggest import did_you_mean

__all__ = [
    "init_distributed",
    "select_device",
    "seed_everything",
    "lock_work_dir",
    "make_run_dir",
    "new_folders",
    "open_run",
    "remove_empty_folders",
    "remove_run_folder",
    "make_logger",
    "dump_config",
    "config_name",
    "env_summary",
    "derived_summary",
]


def init_distributed(env_cfg: dict) -> None:
    """Join the process group when launched by torchrun, or by srun without torchrun (Slurm's
    variables read as torchrun's: :mod:`libai.runner.slurm`); no-op for a single process."""
    slurm.adopt_environment()
    if dist.launched_by_torchrun():
        dist.init_dist(backend=env_cfg.get("dist_backend"), timeout_s=env_cfg.get("dist_timeout", 1800))


def select_device(device: str | None) -> torch.device:
    """'auto' (default) picks CUDA when present, else CPU; under torchrun, the local rank's GPU."""
    device = device or "auto"
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda", "mps") and not device.startswith("cuda:"):
        raise ConfigError(f"device={device!r} is not one of 'auto', 'cpu', 'cuda', 'cuda:N', 'mps'.")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device='cuda' but CUDA is not available here; use device='auto' or 'cpu'.")
        return torch.device("cuda", dist.get_local_rank() % torch.cuda.device_count())
    return torch.device(device)


_RANDOMNESS_KEYS = ("seed", "deterministic", "diff_rank_seed")


def seed_everything(randomness: dict, rank: int | None = None) -> int:
    """Seed python, numpy and torch; return the seed used (drawn and shared if none is set).

    ``randomness=dict(seed=None, deterministic=False, diff_rank_seed=False)``: with
    ``diff_rank_seed`` each rank uses ``seed + rank``; ``deterministic`` turns on what a
    bit-identical resume on CUDA needs (docs/reliability.md; slower on GPU): deterministic
    kernels, cuBLAS's fixed workspace and cuDNN without autotuning. It is called before the model
    is built, so before the process's first cuBLAS call, which reads the workspace setting.
    ``rank`` is the data-parallel rank (tensor-parallel peers must draw the same numbers).
    Defaults to None: the process's rank.
    """
    for key in randomness:
        if key not in _RANDOMNESS_KEYS:
            raise ConfigError(f"Unknown key 'randomness.{key}'.{did_you_mean(key, _RANDOMNESS_KEYS)}")
    seed = randomness.get("seed")
    if seed is None:
        seed = dist.broadcast_object(random.SystemRandom().randrange(2**31))
    rank = dist.get_rank() if rank is None else rank
    rank_seed = seed + rank if randomness.get("diff_rank_seed") else seed
    random.seed(rank_seed)
    np.random.seed(rank_seed % 2**32)
    torch.manual_seed(rank_seed)
    if randomness.get("deterministic"):
        # a value of the user's own (":16:8", the other deterministic one) is kept
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    return int(seed)


def lock_work_dir(work_dir: str, dry_run: bool = False) -> WorkDirLock | None:
    """Take ``work_dir``'s lock (:mod:`libai.utils.run_lock`) on rank 0, so that a second run
    started there is refused with one line on every rank; the returned lock is held until it is
    collected or the process ends. A dry run writes nothing there and takes none (None)."""
    if dry_run:
        return None
    lock, refusal = None, None
    if dist.is_main_process():
        try:
            lock = acquire(work_dir)
        except ConfigError as e:
            refusal = str(e)
    refusal = dist.broadcast_object(refusal)
    if refusal is not None:
        raise ConfigError(refusal)
    return lock


def make_run_dir(work_dir: str, dry_run: bool = False) -> tuple[str, str]:
    """Create a new run folder ``work_dir/<timestamp>/`` (the same on every rank; see
    :mod:`libai.utils.run_layout`); return (its name, its path).

    ``dry_run`` (``--fast-dev-run``): a temporary folder outside the work dir instead, removed
    when the process exits, so that the work dir is left exactly as it was.
    """
    if dry_run:
        import atexit
        import shutil
        import tempfile

        path = tempfile.mkdtemp(prefix="libai-fast-dev-run-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        return time.strftime("%Y%m%d_%H%M%S"), path
    from libai.utils.run_layout import new_run_folder

    stamp = new_run_folder(work_dir)[0] if dist.is_main_process() else None
    stamp = dist.broadcast_object(stamp)
    dist.barrier()
    return stamp, os.path.join(work_dir, stamp)


def new_folders(path: str) -> list[str]:
    """The folders of ``path`` that do not exist yet, deepest first: those a run creates, and the
    only ones :func:`remove_empty_folders` may take away again."""
    missing, path = [], os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    return missing


def remove_run_folder(log_dir: str, logger: logging.Logger) -> None:
    """Undo :func:`open_run` for a run refused before its loop started, on rank 0: the
    run folder goes, with what is in it (its log, ``config.py``). The folder was made new and
    empty for this run (:func:`~libai.utils.run_layout.new_run_folder`), so all of it is this
    run's. docs/reliability.md: a refused run writes nothing."""
    if not dist.is_main_process():
        return
    for handler in list(logger.handlers):  # the log file is closed before it goes
        if os.path.dirname(getattr(handler, "baseFilename", "")) == os.path.abspath(log_dir):
            logger.removeHandler(handler)
            handler.close()
    shutil.rmtree(log_dir, ignore_errors=True)


def remove_empty_folders(folders: list[str]) -> None:
    """Remove ``folders`` in turn (deepest first) on rank 0, stopping at the first that is not
    empty: it holds something that is not this run's."""
    if not dist.is_main_process():
        return
    for folder in folders:
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            continue
        except OSError:  # not empty (another run, a user's file) or not ours to remove
            return


def env_summary(device: torch.device, seed: int, extra: dict[str, Any] | None = None) -> str:
    """A few lines for the top of the log: versions, device, world size, seed."""
    from libai.version import __version__

    lines = {
        "libai": __version__,
        "python": sys.version.split()[0] + f" ({platform.platform()})",
        "torch": torch.__version__,
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "world size": dist.get_world_size(),
        "CPU threads": torch.get_num_threads(),
        "seed": seed,
    }
    lines.update(extra or {})
    width = max(map(len, lines))
    return "Environment:\n" + "\n".join(f"  {k:<{width}}  {v}" for k, v in lines.items())


def make_logger(cfg: Any, log_dir: str, timestamp: str, rank: int) -> logging.Logger:
    """The run's logger: the console, and ``log_dir/<timestamp>.log`` on rank 0."""
    from libai.utils.logging import get_logger

    log_file = os.path.join(log_dir, f"{timestamp}.log") if dist.is_main_process() else None
    return get_logger("libai", log_file=log_file, level=cfg.get("log_level") or "INFO", rank=rank)


def dump_config(cfg: Any, path: str, logger: logging.Logger) -> str:
    """Save the validated config to ``path``; return its text (checkpoints carry it: formatting
    it again is slow). Helper variables ('_x') are already folded into values."""
    from libai.config import Config
    from libai.utils.errors import ConfigError as _ConfigError

    keep = Config({k: v for k, v in cfg.to_dict().items() if not str(k).startswith("_")},
                  filename=cfg.filename)
    try:
        keep.dump(path)
    except _ConfigError as e:  # objects given in place of dicts (a model instance, a hook)
        logger.warning(f"The saved config cannot be re-run as is: {e}")
        with open(path, "w") as f:
            f.write(f"# Not loadable as is: {e}\n{keep.pretty_text}")
    with open(path) as f:
        return f.read()


def config_name(cfg: Any) -> str:
    """The experiment name a config gets by default: its file name without the extension."""
    name = getattr(cfg, "filename", None)
    return os.path.splitext(os.path.basename(name))[0] if name else "experiment"


def derived_summary(loop: Any, optim_wrapper: Any, data_parallel: Any) -> str:
    """Values derived from the config (logged, never written back into it): iterations per
    epoch, the last iteration, the effective batch size."""
    acc = getattr(optim_wrapper, "accumulative_counts", 1)
    batch = getattr(loop.dataloader, "batch_size", None) or 0
    shares = data_parallel.size
    who = (f"{shares} data-parallel rank(s)" if data_parallel.replicas > 1
           else f"{shares} process(es)")
    asked = getattr(loop, "epochs_asked", None)  # an iteration loop sized by max_epochs
    return (f"Derived: iterations per epoch {loop.iters_per_epoch}, max iterations {loop.max_iters}"
            + (f" (max_epochs={asked}: {asked} x {loop.iters_per_epoch}"
               f"{', max_iters first' if loop.max_iters < asked * loop.iters_per_epoch else ''})"
               if asked else "")
            + (f", max epochs {loop.max_epochs}" if loop.max_epochs else "")
            + f", effective batch size {batch} x {who} x {acc} accumulation = {batch * shares * acc}")


def open_run(cfg: Any, work_dir: str, dry_run: bool, device: torch.device, seed: int,
             rank: int) -> tuple[str, str, logging.Logger, str | None]:
    """Start the run's folder and log: the run folder (:func:`make_run_dir`), the logger, the
    environment lines, and the saved config on rank 0. Returns (timestamp, run folder, logger,
    the config's text or None on other ranks)."""
    timestamp, log_dir = make_run_dir(work_dir, dry_run=dry_run)
    logger = make_logger(cfg, log_dir, timestamp, rank)
    where = (f"{log_dir} (temporary: a --fast-dev-run writes nothing into {work_dir})"
             if dry_run else log_dir)
    slurm_row, requeue_warning = slurm.summary(cfg.get("resume"))
    logger.info(env_summary(device, seed, {"work dir": where, **slurm_row}))
    if requeue_warning:
        logger.warning(requeue_warning)
    text = dump_config(cfg, os.path.join(log_dir, "config.py"), logger) if dist.is_main_process() else None
    return timestamp, log_dir, logger, text
