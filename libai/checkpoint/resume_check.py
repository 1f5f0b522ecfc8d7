"""Compare the config a checkpoint was trained with to the current one before resuming.

Changes that would alter the schedule of the resumed run are refused unless the user opts in with
``resume_options=dict(allow_changes=[...])``; every other change is reported. The checkpoint keeps
its config as JSON: reading it back never runs code.
"""

from __future__ import annotations

import json
from typing import Any

from libai.utils.errors import ConfigError

__all__ = ["GUARDED", "config_json", "check_resume_config"]

# Keys whose change alters what the resumed run computes (its schedule or its data order).
# A listed key guards everything below it.
GUARDED = (
    "train_cfg.type",
    "train_cfg.max_iters",
    "train_cfg.max_epochs",
    "train_dataloader.batch_size",
    "train_dataloader.sampler",
    "optim_wrapper.accumulative_counts",
    "optim_wrapper.optimizer.lr",
    "param_scheduler",
    "randomness.seed",
    "world_size",
)
# Keys that name where things are, not what is computed.
IGNORED = ("work_dir", "resume", "load_from", "resume_options", "experiment_name")


def _json_default(obj: Any) -> Any:
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}.{name}" if module and name else repr(obj)


def config_json(cfg: Any) -> str:
    """The config as JSON text (classes as dotted paths, other objects as their repr)."""
    return json.dumps(cfg.to_dict(), default=_json_default, sort_keys=True)


def _flatten(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(value, list) and value and any(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            _flatten(v, f"{path}.{i}", out)
    else:
        out[path] = value


def _under(path: str, prefixes: tuple[str, ...] | list[str]) -> bool:
    return any(path == p or path.startswith(p + ".") for p in prefixes)


def check_resume_config(saved_json: str | None, saved_world_size: int | None, cfg: Any,
                        world_size: int, logger: Any, saved_shares: int | None = None,
                        shares: int | None = None, saved_fit: list | None = None,
                        fit: list | None = None) -> None:
    """Log the differences; raise ConfigError for guarded changes the config did not allow.

    Args:
        saved_json: ``meta.config_json`` of the checkpoint (None for checkpoints without it).
        saved_world_size: ``meta.world_size`` of the checkpoint.
        cfg: The current, validated config.
        world_size: The current number of processes.
        logger: Where the report goes.
        saved_shares: ``meta.data_shares`` of the checkpoint (None for checkpoints without it).
        shares: The current number of data shares. When both are known and equal, a change of
            the world size alone (a pipeline or tensor-parallel size) changes no batch: it is
            not guarded.
        saved_fit, fit: ``[micro-batch, accumulation]`` that ``micro_batch``/``'auto'`` chose
            (libai/runner/batch_fit.py), in the checkpoint and now: compared as
            ``train_dataloader.batch_size.chosen`` and ``optim_wrapper.accumulative_counts.chosen``
            (the config says ``'auto'`` both times, the GPU may differ).
    """
    if saved_json is None:
        logger.warning("The checkpoint holds no config to compare with; resuming as configured.")
        return
    old: dict[str, Any] = {}
    new: dict[str, Any] = {}
    _flatten(json.loads(saved_json), "", old)
    _flatten(json.loads(config_json(cfg)), "", new)
    old["world_size"], new["world_size"] = saved_world_size, world_size
    for i, key in enumerate(("train_dataloader.batch_size", "optim_wrapper.accumulative_counts")):
        if saved_fit and fit and old.get(key) == new.get(key) == "auto":
            old[f"{key}.chosen"], new[f"{key}.chosen"] = saved_fit[i], fit[i]
    changes = [
        (path, old.get(path, "<absent>"), new.get(path, "<absent>"))
        for path in sorted(set(old) | set(new))
        if old.get(path, "<absent>") != new.get(path, "<absent>") and not _under(path, IGNORED)
    ]
    allowed = list((dict(cfg.get("resume_options") or {})).get("allow_changes") or [])
    same_batches = saved_shares is not None and saved_shares == shares
    guarded = [c for c in changes if _under(c[0], GUARDED)
               and not (c[0] == "world_size" and same_batches)]
    refused = [c for c in guarded if not (allowed == ["all"] or _under(c[0], allowed))]
    if refused:
        lines = "\n".join(f"  {p}: {o!r} in the checkpoint, {n!r} now" for p, o, n in refused)
        keys = ", ".join(repr(p) for p, _, _ in refused)
        raise ConfigError(
            f"Resuming would change the schedule of the run:\n{lines}\nThe resumed run would not "
            f"continue the one that was interrupted. Restore these values, or accept the change "
            f"explicitly with resume_options=dict(allow_changes=[{keys}]) (or --allow-changes on "
            f"tools/train.py)."
        )
    if changes:
        text = "\n".join(f"  {p}: {o!r} -> {n!r}" + ("  (allowed)" if (p, o, n) in guarded else "")
                         + (f"  ({shares} data share(s) both times: the same batches)"
                            if p == "world_size" and same_batches else "")
                         for p, o, n in changes)
        logger.info(f"Config changed since the checkpoint (the current values apply):\n{text}")
