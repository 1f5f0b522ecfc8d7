"""The micro-batch that fits the device, and the accumulation that keeps the global batch.

A config opts in with a top-level ``micro_batch`` key and ``train_dataloader.batch_size='auto'``::

    micro_batch = dict(
        global_batch=256,                            # sequences per optimizer step, all processes
        table=[(14, 8), (21, 16), (35, 32), (62, 64)],  # (GB of GPU memory at least, micro-batch)
        cpu=2,                                       # the micro-batch without a GPU
    )
    train_dataloader = dict(..., batch_size="auto")
    optim_wrapper = dict(..., accumulative_counts="auto")  # optional: absent is 'auto' too

The runner resolves it once the device is known (a config file runs before that, and a
``--cfg-options`` override must still win): the micro-batch is the table's row for the GPU's
memory (``torch.cuda.get_device_properties(device).total_memory``, in GiB), or ``cpu``
elsewhere; a number given as ``train_dataloader.batch_size`` (in the file or by
``--cfg-options``) wins. ``optim_wrapper.accumulative_counts='auto'`` (or absent) becomes
``global_batch // (micro-batch x data-parallel processes)``, at least 1; a number given there
wins too, and the log line says which global batch that makes. The choice is logged in one line
and never written back into the config (the saved config still says ``'auto'``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from libai.utils.errors import ConfigError

__all__ = ["AUTO", "BatchFit", "device_memory_gb", "loader_cfg", "optim_cfg", "resolve"]

AUTO = "auto"
_USAGE = "micro_batch=dict(global_batch=256, table=[(GB, micro-batch), ...], cpu=2)"


@dataclass(frozen=True)
class BatchFit:
    """What :func:`resolve` chose: the micro-batch, the accumulation and why."""

    micro: int
    accumulation: int
    processes: int
    asked: int | None  # micro_batch.global_batch, when given
    micro_why: str
    accumulation_given: bool = False

    @property
    def global_batch(self) -> int:
        return self.micro * self.accumulation * self.processes

    def summary(self) -> str:
        """One log line: what was chosen, and why."""
        over = f" over {self.processes} processes" if self.processes > 1 else ""
        given = " (optim_wrapper.accumulative_counts, given)" if self.accumulation_given else ""
        line = (f"Micro-batch {self.micro} ({self.micro_why}), accumulating {self.accumulation}"
                f"{given}{over} for a global batch of {self.global_batch}")
        if self.asked is not None and self.global_batch != self.asked:
            line += (f" (micro_batch.global_batch={self.asked} is not reachable: it is not a "
                     f"multiple of {self.micro} x {self.processes} process(es))"
                     if not self.accumulation_given else
                     f" (micro_batch.global_batch asks for {self.asked})")
        return line


def device_memory_gb(device: torch.device) -> float | None:
    """The GPU's memory in GiB (an H200 reports 140, an H100 80 GB 79.6), None off CUDA."""
    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(device).total_memory / 2**30


def _source(cfg: Any) -> str:
    """The config file, as the log names it: relative to the working directory when inside it."""
    name = getattr(cfg, "filename", None)
    if not name:
        return "the config"
    rel = os.path.relpath(name)
    return os.path.basename(name) if rel.startswith("..") else rel


def _check_spec(spec: Any) -> tuple[int | None, list[tuple[float, int]], int]:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"micro_batch must be a dict, got {spec!r}: {_USAGE}.")
    unknown = sorted(set(spec) - {"global_batch", "table", "cpu"})
    if unknown:
        raise ConfigError(f"Unknown key 'micro_batch.{unknown[0]}': the keys are global_batch, "
                          f"table and cpu ({_USAGE}).")
    table = spec.get("table") or []
    ok = isinstance(table, Sequence) and all(
        isinstance(row, Sequence) and len(row) == 2 and isinstance(row[0], (int, float))
        and _positive(row[1]) for row in table)
    if not ok:
        raise ConfigError(f"micro_batch.table must be a list of (GB of GPU memory, micro-batch) "
                          f"pairs, got {table!r}.")
    cpu, glob = spec.get("cpu", 1), spec.get("global_batch")
    for key, value in (("cpu", cpu), ("global_batch", glob)):
        if not _positive(value) and not (key == "global_batch" and value is None):
            raise ConfigError(f"micro_batch.{key} must be an int >= 1, got {value!r}.")
    return glob, sorted((float(gb), int(m)) for gb, m in table), int(cpu)


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _from_table(table: list[tuple[float, int]], cpu: int, memory: float | None,
                source: str) -> tuple[int, str]:
    if memory is None:
        return cpu, f"no GPU: micro_batch.cpu in {source}"
    gb = f"{memory:.0f}"
    a = "an" if gb.startswith("8") or gb in ("11", "18") else "a"  # an 80 GB, a 141 GB GPU
    if not table:
        return cpu, f"{a} {gb} GB GPU, micro_batch.table empty: micro_batch.cpu in {source}"
    rows = [m for gb, m in table if memory >= gb]
    if not rows:
        return table[0][1], (f"{a} {gb} GB GPU, below the smallest row ({table[0][0]:g} GB) of "
                             f"the table in {source}")
    return rows[-1], f"{a} {gb} GB GPU: the table in {source}"


def resolve(cfg: Mapping, device: torch.device, processes: int) -> BatchFit | None:
    """The micro-batch and accumulation of ``cfg`` on ``device`` with ``processes`` data-parallel
    processes; None when the config has no ``micro_batch`` (its numbers stand as written)."""
    spec, loader = cfg.get("micro_batch"), cfg.get("train_dataloader")
    given = loader.get("batch_size") if isinstance(loader, Mapping) else None
    if spec is None:
        wrapper = cfg.get("optim_wrapper")  # a dict, or a built wrapper (its numbers stand)
        accumulation = wrapper.get("accumulative_counts") if isinstance(wrapper, Mapping) else None
        for key, value in (("train_dataloader.batch_size", given),
                           ("optim_wrapper.accumulative_counts", accumulation)):
            if value == AUTO:
                raise ConfigError(f"{key}='auto' needs a micro_batch key to choose from: add "
                                  f"{_USAGE}, or give {key.split('.')[1]} a number.")
        return None
    if not isinstance(loader, Mapping):
        return None  # nothing to train: nothing to fit
    asked, table, cpu = _check_spec(spec)
    if given == AUTO:
        micro, why = _from_table(table, cpu, device_memory_gb(device), _source(cfg))
    elif _positive(given):
        micro, why = given, "train_dataloader.batch_size, given"
    else:
        raise ConfigError(f"train_dataloader.batch_size must be an int >= 1 or 'auto', "
                          f"got {given!r}.")
    wrapper = cfg.get("optim_wrapper")
    accumulation = (wrapper.get("accumulative_counts", AUTO) if isinstance(wrapper, Mapping)
                    else AUTO if wrapper is None else wrapper.accumulative_counts)  # built: its own
    if accumulation != AUTO:
        return BatchFit(micro, accumulation, processes, asked, why, accumulation_given=True)
    per_step = micro * processes
    accumulation = max(1, asked // per_step) if asked else 1
    return BatchFit(micro, accumulation, processes, asked, why)


def loader_cfg(section: Any, fit: BatchFit | None) -> Any:
    """The train loader's config with the chosen micro-batch (the config itself unchanged)."""
    if fit is None or not isinstance(section, Mapping):
        return section
    plain = section.to_dict() if hasattr(section, "to_dict") else dict(section)
    return dict(plain, batch_size=fit.micro)


def optim_cfg(section: Any, fit: BatchFit | None) -> Any:
    """The optimizer wrapper's config with the chosen accumulation."""
    if fit is None or not isinstance(section, Mapping):
        return section
    plain = section.to_dict() if hasattr(section, "to_dict") else dict(section)
    return dict(plain, accumulative_counts=fit.accumulation)
