"""Hooks: side work at named points of the loops (logging, checkpoints, schedules, EMA ...).

See docs/hooks.md. ``DEFAULT_HOOKS`` is what every runner starts from; a config changes an
entry with ``default_hooks=dict(logger=dict(interval=10))``, removes one with
``default_hooks=dict(checkpoint=None)`` and adds more with ``custom_hooks=[dict(type=...)]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .checkpoint_hook import CheckpointHook
from .dump import DumpPredictionsHook
from .early_stopping_hook import EarlyStoppingHook
from .ema_hook import EMAHook
from .empty_cache_hook import EmptyCacheHook
from .histogram_hook import HistogramHook  # noqa: F401 - registers it in HOOKS
from .hook import PRIORITIES, STAGES, Hook, get_priority
from .iter_timer_hook import IterTimerHook
from .logger_hook import LoggerHook
from .nonfinite_loss_hook import NonFiniteLossHook
from .optuna_pruning_hook import OptunaPruningHook  # noqa: F401 - registers it in HOOKS
from .param_scheduler_hook import ParamSchedulerHook
from .profiler_hook import ProfilerHook  # noqa: F401 - registers it in HOOKS
from .runtime_info_hook import RuntimeInfoHook
from .sampler_seed_hook import DistSamplerSeedHook
from .throughput_hook import ThroughputHook  # noqa: F401 - registers it in HOOKS

__all__ = [
    "DEFAULT_HOOKS",
    "PRIORITIES",
    "STAGES",
    "CheckpointHook",
    "DistSamplerSeedHook",
    "DumpPredictionsHook",
    "EMAHook",
    "EarlyStoppingHook",
    "EmptyCacheHook",
    "Hook",
    "IterTimerHook",
    "LoggerHook",
    "NonFiniteLossHook",
    "ParamSchedulerHook",
    "RuntimeInfoHook",
    "default_hook_options",
    "get_priority",
]

# The hooks of every run, by name. Config dicts, not instances: the runner copies and updates
# them with the config's default_hooks before building.
DEFAULT_HOOKS: dict[str, dict] = {
    "runtime_info": dict(type="RuntimeInfoHook"),
    "timer": dict(type="IterTimerHook"),
    "logger": dict(type="LoggerHook", interval=50),
    "param_scheduler": dict(type="ParamSchedulerHook"),
    "checkpoint": dict(type="CheckpointHook", interval=-1, save_last=True),
    "sampler_seed": dict(type="DistSamplerSeedHook"),
    "nonfinite": dict(type="NonFiniteLossHook", policy="raise"),
    "throughput": dict(type="ThroughputHook"),  # summary, FLOPs, samples/s, MFU
}


def default_hook_options(cfg: Mapping[str, Any],
                         options: Sequence[str] | Mapping[str, Any] | None) -> dict[str, Any]:
    """``--cfg-options`` with every default hook a key one may set or switch off without ``+``
    (``default_hooks.throughput=None``), whether or not the config lists it: those keys get the
    ``+`` that adds a key on purpose. Any other key, a misspelt hook name included, is as given
    (and the merge refuses a missing one with a suggestion).

    Args:
        cfg: The config the options go into.
        options: ``KEY=VALUE`` strings or a dict, as ``Config.merge_from_options`` takes them.

    Returns:
        The options as a dict (values parsed), for ``Config.merge_from_options``.
    """
    from libai.config.options import parse_options

    listed = cfg.get("default_hooks") or {}
    out: dict[str, Any] = {}
    for key, value in parse_options(options):
        parts = key.split(".")
        if (len(parts) >= 2 and parts[0] == "default_hooks" and parts[1] in DEFAULT_HOOKS
                and parts[1] not in listed):
            key = "+" + key
        out[key] = value
    return out
