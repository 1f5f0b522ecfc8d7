"""Experiment trackers as log backends: Weights & Biases (offline by default) and MLflow.

Both are optional dependencies, imported when a run opens them; a missing one is one line
naming the ``pip install``. They batch rows like the other backends and talk to their library
in ``flush()``. See docs/tools.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from libai.registry import LOG_BACKENDS
from libai.utils.errors import ConfigError

from .log_backends import Histogram, _BatchedBackend, flatten_config

__all__ = ["MLflowBackend", "WandbBackend"]

_logger = logging.getLogger("libai")


def _import(backend: str, module: str, package: str) -> Any:
    """Import an optional tracker library, or one ConfigError line naming the pip install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"LoggerHook backend {backend} needs {module}: pip install {package}"
        ) from None


def _exit_status() -> str:
    """How the run is ending, read while LoggerHook closes its backends (in the runner's
    ``finally``): 'FINISHED', 'FAILED' (an exception) or 'KILLED' (Ctrl-C)."""
    exc = sys.exc_info()[1]
    if exc is None:
        return "FINISHED"
    return "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)



def _reopen(backend: Any, log_dir: str, resume_step: int | None) -> None:
    """Where a tracker backend writes and whether it continues a run. The first ``open`` sets
    the folder; a later one (the test that ``tools/train.py`` runs after training, into the run
    folder) goes on with the same tracker run, in that folder."""
    if backend.log_dir is None:
        backend.log_dir = log_dir
        backend._resume = bool(resume_step)  # 0: a fresh training run
    else:
        backend._resume = True
    backend._flushed_at = time.monotonic()


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
        self._wandb = _import("WandbBackend", "wandb", "wandb")
        _reopen(self, log_dir, resume_step)

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
        earlier = _read_json(id_file) if self._resume else {}
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
        _write_json(id_file, {"id": self.run.id, "project": project})

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
            self.run.finish(exit_code=0 if _exit_status() == "FINISHED" else 1)
            self.run = None
        self._wandb = None


def _mlflow_key(key: str) -> str:
    """A name MLflow accepts: alphanumerics, ``_ - . /`` and spaces, no empty, '.' or '..'
    path segment, at most 250 characters."""
    key = re.sub(r"[^/\w.\- ]", "_", str(key))
    parts = ["_" if p in (".", "..") else p for p in key.split("/") if p]
    return "/".join(parts)[:250] or "_"


@LOG_BACKENDS.register_module()
class MLflowBackend(_BatchedBackend):
    """MLflow: the scalars as metrics (``step`` = train iteration), the config as parameters,
    the final values as tags ``final/<name>`` and the best checkpoint as tags
    ``best_checkpoint`` (absolute path), ``best_metric`` and ``best_score``.

    By default the runs go to a local file store, ``<log dir>/mlruns`` (the series' run folder
    for training; for ``tools/test.py`` its own run folder), unless ``MLFLOW_TRACKING_URI`` is
    set; view it with ``mlflow ui --backend-store-uri <run folder>/mlruns``. MLflow 3 keeps file stores
    only behind ``MLFLOW_ALLOW_FILE_STORE=true``: this backend sets that variable (unless it
    is set) when it writes to a local folder. Or give ``tracking_uri``: a server
    (``'http://host:5000'``) or a database (``'sqlite:///mlflow.db'``, needs SQLAlchemy).

    The experiment is the config's ``experiment_name`` (else the config file's stem), the run
    is named after the run's timestamp. Parameters are :func:`flatten_config`'s dotted keys,
    values cut to MLflow's limit (``MAX_PARAM_VAL_LENGTH``: 6000 characters in MLflow 3),
    sent 100 at a time. The run id is kept in ``<log dir>/mlflow_run.json``: a resumed run
    logs into the same MLflow run (parameters it already has keep their first value; MLflow
    keeps metric points an earlier attempt logged past the resumed step), and so does the test
    that ``tools/train.py`` runs after training, in the same store. The run ends as FINISHED,
    FAILED (an exception) or KILLED (Ctrl-C).

    MLflow has no histograms: HistogramHook's are skipped, unless ``histogram_stats=True``
    logs ``<tag>/min``, ``/max``, ``/mean`` and ``/std`` metrics for each.

    Metrics are kept and sent every ``flush_secs``, before each checkpoint and at the end. A
    failed send (a tracking server down) logs a warning and training goes on.

    Args:
        tracking_uri: Where runs go. Defaults to None: ``MLFLOW_TRACKING_URI``, else
            ``<log dir>/mlruns``.
        experiment_name: Defaults to None: the run's experiment name.
        run_name: Defaults to None: the run's timestamp.
        tags: Extra run tags. Defaults to None.
        histogram_stats: Log summary statistics of histograms as metrics. Defaults to False.
        flush_secs: Longest time added metrics wait before reaching MLflow. Defaults to 10.
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment_name: str | None = None,
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
        histogram_stats: bool = False,
        flush_secs: float = 10,
    ) -> None:
        super().__init__(flush_secs)
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.run_name = run_name
        self.tags = dict(tags or {})
        self.histogram_stats = bool(histogram_stats)
        self.log_dir: str | None = None
        self.client: Any = None
        self.run_id: str | None = None
        self._mlflow: Any = None
        self._resume = False
        self._keys: dict[str, str] = {}

    def open(self, log_dir: str, resume_step: int | None = None) -> None:
        self._mlflow = _import("MLflowBackend", "mlflow", "mlflow")
        _reopen(self, log_dir, resume_step)

    def _uri(self) -> str:
        from pathlib import Path
        from urllib.parse import urlparse

        assert self.log_dir is not None
        uri = (self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
               or Path(self.log_dir, "mlruns").resolve().as_uri())
        if urlparse(uri).scheme in ("", "file"):  # a local folder: MLflow's file store
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        return uri

    def log_config(
        self,
        config: Mapping[str, Any],
        *,
        experiment_name: str | None = None,
        run_name: str | None = None,
    ) -> None:
        self._start(experiment_name, run_name)
        self._log_params(flatten_config(config))

    def _start(self, experiment: str | None = None, run_name: str | None = None) -> None:
        if self.client is not None:
            return
        if self._mlflow is None or self.log_dir is None:
            raise RuntimeError("MLflowBackend used before open()")
        from mlflow.tracking import MlflowClient

        uri = self._uri()
        client = MlflowClient(tracking_uri=uri)
        name = self.experiment_name or experiment or "libai"
        exp = client.get_experiment_by_name(name)
        if exp is None:
            exp_id = client.create_experiment(name)
        else:
            exp_id = exp.experiment_id
            if exp.lifecycle_stage == "deleted":
                client.restore_experiment(exp_id)
        state_file = os.path.join(self.log_dir, "mlflow_run.json")
        earlier = _read_json(state_file) if self._resume else {}
        run_id = None
        if earlier.get("tracking_uri") == uri and earlier.get("experiment_id") == exp_id:
            try:
                run_id = client.get_run(earlier["run_id"]).info.run_id
                client.update_run(run_id, status="RUNNING")
            except Exception:  # deleted meanwhile: start a new run
                run_id = None
        if run_id is None:
            run_id = client.create_run(
                exp_id, run_name=self.run_name or run_name, tags=self.tags
            ).info.run_id
        self.client, self.run_id = client, run_id
        _write_json(state_file, {"tracking_uri": uri, "experiment_id": exp_id, "run_id": run_id})

    def _key(self, key: str) -> str:
        name = self._keys.get(key)
        if name is None:
            name = self._keys[key] = _mlflow_key(key)
        return name

    def _log_params(self, flat: dict[str, Any]) -> None:
        from mlflow.entities import Param

        try:
            from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH as limit
        except ImportError:
            limit = 500
        have = dict(self.client.get_run(self.run_id).data.params) if self._resume else {}
        params: dict[str, str] = {}
        for k, v in flat.items():
            params.setdefault(self._key(k), str(v)[:limit])
        changed = sorted(k for k, v in params.items() if k in have and have[k] != v)
        if changed:
            _logger.info(f"MLflowBackend: the resumed run keeps the first value of parameter(s) "
                         f"{', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''}.")
        todo = [Param(k, v) for k, v in params.items() if k not in have]
        for i in range(0, len(todo), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=todo[i:i + 100])

    def add_histogram(self, tag: str, values: Any, step: int) -> None:
        if not self.histogram_stats or self._mlflow is None:
            return
        hist = Histogram.of(values)
        if hist is None:
            return
        mean = hist.sum / hist.num
        var = max(hist.sum_squares / hist.num - mean * mean, 0.0)
        self._pending.append((int(step), time.time(), {
            f"{tag}/min": hist.min, f"{tag}/max": hist.max, f"{tag}/mean": mean,
            f"{tag}/std": var ** 0.5}))

    def _accepts(self) -> bool:
        if self._mlflow is None:
            raise RuntimeError("MLflowBackend.add_scalars called before open()")
        return True

    def _write_rows(self, rows: list[tuple[int, float, dict[str, float]]]) -> None:
        from mlflow.entities import Metric

        self._start()
        metrics = [
            Metric(self._key(k), float(v), int(wall_time * 1000), step)
            for step, wall_time, row in rows
            for k, v in row.items()
        ]
        try:
            for i in range(0, len(metrics), 1000):  # MLflow's limit per batch
                self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])
        except Exception as e:  # a tracker must not stop training
            _logger.warning(f"MLflowBackend: could not log {len(metrics)} metric value(s) "
                            f"({type(e).__name__}: {e}); training goes on.")

    def log_summary(self, metrics: Mapping[str, float], best: Mapping[str, Any] | None = None) -> None:
        from mlflow.entities import RunTag

        if self._mlflow is None:
            return
        self.flush()
        self._start()
        tags = {f"final/{self._key(k)}": repr(float(v)) for k, v in metrics.items()}
        tags.update({f"best_{k}": str(v) for k, v in (best or {}).items()})
        items = [RunTag(k[:250], v[:5000]) for k, v in tags.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, tags=items[i:i + 100])

    def close(self) -> None:
        if self._mlflow is None:
            return
        self.flush()
        if self.client is not None:
            self.client.set_terminated(self.run_id, status=_exit_status())
            self.client = None
        self._mlflow = None
