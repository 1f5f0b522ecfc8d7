"""Checks made when a run is built, before anything slow: everything the user controls that can be
known wrong at second one (the launcher's environment, the device, output paths, enum-like keys,
counts) is refused here with one line naming the key and the fix, instead of failing after an
hour of training or with a traceback from deep inside torch.

Each check is a plain function of a value, so tools can call them on their own flags too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch

from libai.utils import dist
from libai.utils.errors import CheckpointError, ConfigError
from libai.utils.paths import check_output_path
from libai.utils.suggest import did_you_mean, refuse_unknown

__all__ = [
    "LOG_LEVELS",
    "TORCHRUN_VARS",
    "preflight",
    "check_watched_metrics",
    "check_model_type",
    "check_input_path",
    "check_count",
    "check_choice",
    "check_torchrun_env",
    "check_device",
    "check_compile",
]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# What torchrun sets for every worker and env:// initialisation reads (LOCAL_RANK defaults to 0).
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def preflight(cfg: Any, fast_dev_run: Any = 0) -> None:
    """Check a validated config before the runner builds anything.

    Args:
        cfg: The runner's config (read only).
        fast_dev_run: The runner's ``fast_dev_run`` argument. Defaults to 0.

    Raises:
        ConfigError: The first problem found, naming the key and the fix.
        CheckpointError: ``load_from`` or ``resume`` names a file that does not exist.
    """
    check_count("fast_dev_run", fast_dev_run)
    check_torchrun_env(os.environ)
    check_output_path(cfg.get("work_dir") or "work_dirs/default", "work_dir", folder=True)
    check_device(cfg.get("device"))
    check_choice("log_level", cfg.get("log_level") or "INFO", LOG_LEVELS, upper=True)
    check_compile(cfg.get("compile"))
    check_input_path("load_from", cfg.get("load_from"))
    resume = cfg.get("resume")
    if resume is not None and not isinstance(resume, (bool, str)):
        raise ConfigError(f"resume={resume!r}: expected True (the latest checkpoint in work_dir), "
                          f"False, or a checkpoint path.")
    if isinstance(resume, str):
        check_input_path("resume", resume)
    _check_resume_options(cfg.get("resume_options"))
    for stage in ("val", "test"):  # now, not when the loop is built (after a first epoch)
        loop_cfg = cfg.get(f"{stage}_cfg")
        if isinstance(loop_cfg, Mapping):
            from libai.loops.evaluate import check_limit_batches

            check_limit_batches(loop_cfg.get("limit_batches"), f"{stage}_cfg.limit_batches")
    _check_randomness(cfg.get("randomness"))
    wrapper = cfg.get("optim_wrapper")
    if isinstance(wrapper, Mapping) and isinstance(wrapper.get("dtype"), str):
        check_choice("optim_wrapper.dtype", wrapper["dtype"], ("float16", "bfloat16"))
    for key in ("experiment_name",):
        if cfg.get(key) is not None and not isinstance(cfg.get(key), str):
            raise ConfigError(f"{key}={cfg.get(key)!r}: expected a string.")
    ac = cfg.get("activation_checkpointing")
    if not (ac in (None, False, True, "blocks")
            or (isinstance(ac, Mapping) and set(ac) == {"modules"})):
        raise ConfigError(f"activation_checkpointing={ac!r}: expected None, 'blocks' or "
                          f"dict(modules=['BlockClassName', ...]).")
    for key in ("model_wrapper_cfg", "env_cfg"):
        if cfg.get(key) is not None and not isinstance(cfg.get(key), Mapping):
            raise ConfigError(f"{key}={cfg.get(key)!r}: expected a dict.")


def check_count(key: str, value: Any, minimum: int = 0) -> int:
    """Refuse a count that is not an int >= ``minimum`` (a bool counts as 0 or 1)."""
    if not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{key}={value!r}: expected a whole number >= {minimum}.")
    return int(value)


def check_choice(key: str, value: Any, allowed: tuple[str, ...], upper: bool = False) -> Any:
    """Refuse a value outside ``allowed``, with the closest allowed one."""
    if isinstance(value, int) and not isinstance(value, bool) and upper:
        return value  # a numeric logging level
    name = value.upper() if upper and isinstance(value, str) else value
    if name not in allowed:
        raise ConfigError(f"{key}={value!r} is not one of {', '.join(map(repr, allowed))}."
                          f"{did_you_mean(str(value), allowed)}")
    return value


def check_torchrun_env(environ: Mapping[str, str]) -> None:
    """Refuse a half-set torchrun environment (``WORLD_SIZE=2 python tools/train.py``).

    A process group created by the caller is taken as it is; a world size of 1 is a single
    process whatever else is set.
    """
    if dist.is_distributed() or "WORLD_SIZE" not in environ:
        return
    values = {}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        if name in environ:
            try:
                values[name] = int(environ[name])
            except ValueError:
                raise ConfigError(f"The environment variable {name}={environ[name]!r} is not a "
                                  f"whole number; launch with torchrun, which sets it.") from None
    world = values["WORLD_SIZE"]
    if world < 1:
        raise ConfigError(f"WORLD_SIZE={world} in the environment: it must be >= 1.")
    if world == 1:
        return
    missing = [name for name in TORCHRUN_VARS if not environ.get(name)]
    if missing:
        raise ConfigError(
            f"WORLD_SIZE={world} is set but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not: a multi-process run must be launched by "
            f"torchrun (torchrun --nproc_per_node {world} tools/train.py CONFIG), or unset "
            f"WORLD_SIZE for a single process.")
    rank = values["RANK"]
    if not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} but WORLD_SIZE={world}: the rank must be in "
                          f"0..{world - 1}; launch with torchrun, which sets both.")


def _gpu_count_text() -> str:
    if not torch.cuda.is_available():
        built = "built without CUDA" if torch.version.cuda is None else "built with CUDA"
        return f"this machine has no usable GPU (torch {torch.__version__} is {built})"
    n = torch.cuda.device_count()
    return f"this machine has {n} GPU{'s' if n != 1 else ''} (cuda:0 to cuda:{n - 1})"


def check_device(device: Any) -> None:
    """Refuse a device that does not exist here, saying how many GPUs there are."""
    if device is None or device in ("auto", "cpu"):
        return
    if not isinstance(device, str):
        raise ConfigError(f"device={device!r}: expected 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'.")
    kind, _, index = device.partition(":")
    if kind not in ("cuda", "mps") or (index and (kind != "cuda" or not index.isdigit())):
        hint = did_you_mean(device, ("auto", "cpu", "cuda", "mps"))
        raise ConfigError(f"device={device!r} is not one of 'auto', 'cpu', 'cuda', 'cuda:N', "
                          f"'mps'.{hint}")
    if kind == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError("device='mps' but this machine has no Apple GPU (MPS): use "
                              "device='auto' or 'cpu'.")
        return
    if not torch.cuda.is_available():
        raise ConfigError(f"device={device!r} but {_gpu_count_text()}: use device='auto' or "
                          f"'cpu'.")
    if index and int(index) >= torch.cuda.device_count():
        raise ConfigError(f"device={device!r} but {_gpu_count_text()}: choose one of those, or "
                          f"'cuda' (under torchrun, each process takes its local rank's GPU).")


def check_compile(value: Any) -> None:
    """``compile``: True/False/None, or a dict of ``torch.compile`` arguments and graph-mode
    options (``GRAPH_KEYS``)."""
    if value is None or isinstance(value, bool):
        return
    if not isinstance(value, Mapping):
        fix = " Write compile=True." if str(value).lower() in ("yes", "true", "on", "1") else ""
        raise ConfigError(f"compile={value!r}: expected True, False or a dict of torch.compile "
                          f"arguments such as dict(mode='max-autotune').{fix}")
    from libai.model.graph import COMPILE_KEYS, GRAPH_KEYS

    refuse_unknown(value, COMPILE_KEYS + GRAPH_KEYS,
                   lambda k: f"compile.{k} is not a torch.compile argument",
                   "Valid:")
    mode = value.get("mode")
    if mode is not None and value.get("backend", "inductor") == "inductor":
        modes = tuple(m for m in torch._inductor.list_mode_options() if m != "default")
        check_choice("compile.mode", mode, ("default", *modes))


LOAD_OPTIONS = ("path", "strict", "remap")


def check_input_path(key: str, value: Any) -> None:
    """``load_from`` / ``resume`` (or a tool's argument named ``key``): a file (or a Hugging Face folder for load_from) that exists."""
    if value is None or value is False:
        return
    path = value
    if isinstance(value, Mapping):  # load_from=dict(path=..., strict=True, remap=None)
        refuse_unknown(value, LOAD_OPTIONS, lambda o: f"{key}.{o} is not an option of {key}",
                       "Valid:")
        if not isinstance(value.get("strict", True), bool):
            raise ConfigError(f"{key}.strict={value['strict']!r}: expected True (every key must "
                              f"match) or False (report missing and unexpected keys).")
        key, path = f"{key}.path", value.get("path")
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"{key}={path!r}: expected a checkpoint path.")
    if os.path.exists(path):
        return
    folder, name = os.path.split(os.path.abspath(path))
    names = os.listdir(folder) if os.path.isdir(folder) else []
    hint = did_you_mean(name, [n for n in names if n.endswith((".pth", ".pt", ".ckpt", ".bin"))])
    raise CheckpointError(f"{key}={os.fspath(path)!r}: no such file.{hint} (Relative paths start "
                          f"from {os.getcwd()}.){_written_by(path)}")


def _written_by(path: Any) -> str:
    """A hint when ``path`` is where a shipped config writes its checkpoints (a fine-tuning
    config loading ``work_dirs/bert_tiny/iter_1500.pth`` before bert_tiny was trained)."""
    parts = os.path.normpath(os.fspath(path)).split(os.sep)
    if len(parts) < 3 or parts[-3] != "work_dirs":
        return ""
    from libai.config.loader import package_config_root

    name = parts[-2]
    if not (package_config_root() / f"{name}.py").is_file():
        return ""
    return f" It is written by training configs/{name}.py: run `libai train {name}` first."


def _check_resume_options(options: Any) -> None:
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise ConfigError(f"resume_options={options!r}: expected dict(allow_changes=[...], "
                          f"damaged='stop' or 'rename').")
    refuse_unknown(options, ("allow_changes", "damaged"),
                   lambda k: f"resume_options.{k} is not an option", "Valid:")
    check_choice("resume_options.damaged", options.get("damaged", "stop"), ("stop", "rename"))
    allow = options.get("allow_changes")
    if allow is not None and not (isinstance(allow, (list, tuple))
                                  and all(isinstance(k, str) for k in allow)):
        raise ConfigError(f"resume_options.allow_changes={allow!r}: expected a list of config "
                          f"keys such as ['train_cfg.max_iters'].")


def _check_randomness(randomness: Any) -> None:
    if randomness is None:
        return
    if not isinstance(randomness, Mapping):
        raise ConfigError(f"randomness={randomness!r}: expected dict(seed=..., deterministic=False,"
                          f" diff_rank_seed=False).")
    seed = randomness.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ConfigError(f"randomness.seed={seed!r}: expected a whole number >= 0, or None for "
                          f"a random seed (logged, and shared by every rank).")
    for key in ("deterministic", "diff_rank_seed"):
        if not isinstance(randomness.get(key, False), bool):
            raise ConfigError(f"randomness.{key}={randomness[key]!r}: expected True or False.")


def check_watched_metrics(runner: Any) -> None:
    """A metric a hook must find (``save_best='val/accuracy'``, a strict ``monitor``) is looked up
    before training, in two quiet validation batches, not after the first training interval.
    The RNG states are put back, so the run's numbers do not change."""
    from libai.checkpoint import get_rng_state, set_rng_state
    from libai.hooks._metrics import lookup_metric
    from libai.loops.evaluate import metric_names_of

    watched = {name: type(h).__name__ for h in runner.hooks
               for name in getattr(h, "monitored_metrics", list)()}
    if not watched or runner.val_loop is None or runner.fast_dev_run:
        return
    rng = get_rng_state()
    try:
        names = metric_names_of(runner.val_loop)
    finally:
        set_rng_state(rng)
    for name, hook in watched.items():
        lookup_metric(dict.fromkeys(names, 0.0), name, f"{hook} (checked before training)")


def check_model_type(cfg: Any) -> None:
    """The model's ``type`` resolves (after ``custom_imports``): a typo is one line with the
    closest registered name before the run writes anything. The other parts name theirs when
    they are built."""
    from libai.registry import MODELS

    model = cfg.get("model")
    if isinstance(model, Mapping) and "type" in model:
        MODELS.get(model["type"], path="model")
