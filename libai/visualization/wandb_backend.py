"""Weights & Biases as a log backend (offline by default): an optional dependency, imported when
a run opens the backend. See docs/tools.md.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from libai.registry import LOG_BACKENDS
from libai.utils.errors import ConfigError

from .backends import Histogram, _BatchedBackend, flatten_config
from .trackers import exit_status, import_tracker, read_json, reopen, write_json

_logger = logging.getLogger("libai")

__all__ = ["WandbBackend"]


def _project_name(name: str) -> str:
    """A W&B project name: no ``/ \\ # ? % :``, at most 128 characters."""
    return re.sub(r"[/\\#?%:]+", "-", name).strip("-")[:128] or "libai"


@LOG_BACKENDS.register_module()
class WandbBackend(_BatchedBackend):
    """Weights & Biases: the scalars as the run's history, the config, the final values and the
    best checkpoint in its summary, HistogramHook's histograms (``wandb.Histogram``).

    ``mode='offline'`` (the default) writes the run under ``<log dir>/wandb/offline-run-*``
    and needs no account or network; upload it later with ``wandb sync <that folder>``.
    ``mode='online'`` streams to the W&B server (after ``wandb login``). Without ``mode`` in
    the config the environment variable ``WANDB_MODE`` decides, if set.

    The run is named after the run's timestamp, in the project named after the experiment
    (the config's ``experiment_name``, else the config file's stem); the config goes in as
    dotted keys (:func:`flatten_config`). Its id is kept in ``<log dir>/wandb_run.json``: a
    resumed run (``resume=True``) logs into the same W&B run (``resume='allow'``; offline,
    each attempt is a folder of its own with that id, and ``wandb sync`` given all of them
    uploads them into one run, in order). W&B keeps what an earlier attempt logged past the
    resumed step and drops logged steps that go backwards. The test that ``tools/train.py``
    runs after training goes into the same W&B run (and its summary).

    Rows are kept and handed to wandb every ``flush_secs``, before each checkpoint and at the
    end; the console is not captured (libai writes its own log file) unless
    ``settings=dict(console='wrap')``.

    Args:
        project: W&B project. Defaults to None: the experiment name.
        name: Run name. Defaults to None: the run's timestamp.
        mode: 'offline', 'online' or 'disabled'. Defaults to None: ``WANDB_MODE`` if set,
            else 'offline'.
        entity: W&B team or user. Defaults to None (the account's default).
        tags: Run tags. Defaults to None.
        group: Run group. Defaults to None.
        notes: Run notes. Defaults to None.
        settings: Keyword arguments of ``wandb.Settings``. Defaults to None.
        init_kwargs: More keyword arguments of ``wandb.init`` (they win). Defaults to None.
        flush_secs: Longest time added rows wait before reaching wandb. Defaults to 10.
    """

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        mode: str | None = None,
        entity: str | None = None,
        tags: list[str] | None = None,
        group: str | None = None,
        notes: str | None = None,
        settings: dict | None = None,
        init_kwargs: dict | None = None,
        flush_secs: float = 10,
    ) -> None:
        if mode not in (None, "offline", "online", "disabled"):
            raise ConfigError(
                f"WandbBackend: mode must be 'offline', 'online' or 'disabled', got {mode!r}."
            )
        super().__init__(flush_secs)
        self.project, self.name, self.mode, self.entity = project, name, mode, entity
        self.tags, self.group, self.notes = tags, group, notes
        self.settings = dict(settings or {})
        self.init_kwargs = dict(init_kwargs or {})
        self.log_dir: str | None = None
        self.run: Any = None
        self._wandb: Any = None
        self._resume = False

    def open(self, log_dir: str, resume_step: int | None = None) -> None:
        self._wandb = import_tracker("WandbBackend", "wandb", "wandb")
        reopen(self, log_dir, resume_step)

    def log_config(
        self,
        config: Mapping[str, Any],
        *,
        experiment_name: str | None = None,
        run_name: str | None = None,
    ) -> None:
        self._start(flatten_config(config), experiment_name, run_name)

    def _start(
        self, config: dict | None = None, experiment: str | None = None, run_name: str | None = None
    ) -> None:
        if self.run is not None:
            if config:
                self.run.config.update(config, allow_val_change=True)
            return
        if self._wandb is None or self.log_dir is None:
            raise RuntimeError("WandbBackend used before open()")
        wandb = self._wandb
        project = _project_name(self.project or experiment or "libai")
        id_file = os.path.join(self.log_dir, "wandb_run.json")
        earlier = read_json(id_file) if self._resume else {}
        run_id = earlier.get("id") if earlier.get("project") == project else None
        kwargs: dict[str, Any] = dict(
            project=project,
            entity=self.entity,
            name=self.name or run_name,
            dir=self.log_dir,
            mode=self.mode or os.environ.get("WANDB_MODE") or "offline",
            tags=self.tags,
            group=self.group,
            notes=self.notes,
            settings=wandb.Settings(**{"console": "off", **self.settings}),
        )
        if run_id:
            kwargs.update(id=run_id, resume="allow")
        kwargs.update(self.init_kwargs)
        self.run = wandb.init(**kwargs)
        if config:
            self.run.config.update(config, allow_val_change=True)
        write_json(id_file, {"id": self.run.id, "project": project})

    def _accepts(self) -> bool:
        if self._wandb is None:
            raise RuntimeError("WandbBackend.add_scalars called before open()")
        return True

    def add_histogram(self, tag: str, values: Any, step: int) -> None:
        hist = Histogram.of(values)
        if hist is None or self._wandb is None:
            return
        value = self._wandb.Histogram(np_histogram=(hist.counts, hist.edges))
        self._pending.append((int(step), time.time(), {tag: value}))

    def _write_rows(self, rows: list[tuple[int, float, dict[str, Any]]]) -> None:
        self._start()
        by_step: dict[int, dict[str, Any]] = {}
        for step, _, row in rows:  # one history row per step (wandb's steps only go up)
            by_step.setdefault(step, {}).update(row)
        for step in sorted(by_step):
            self.run.log(by_step[step], step=step)

    def log_summary(self, metrics: Mapping[str, float], best: Mapping[str, Any] | None = None) -> None:
        self.flush()
        if self.run is None:
            return
        summary: dict[str, Any] = dict(metrics)
        if best:
            summary.update({f"best_{k}": v for k, v in best.items()})
        self.run.summary.update(summary)

    def close(self) -> None:
        if self._wandb is None:
            return
        self.flush()
        if self.run is not None:
            run, self.run = self.run, None
            try:
                run.finish(exit_code=0 if exit_status() == "FINISHED" else 1)
            except Exception as e:  # the run is over: a tracker must not fail it now
                _logger.warning(f"WandbBackend: could not finish the wandb run "
                                f"({type(e).__name__}: {e}).")
        self._wandb = None

