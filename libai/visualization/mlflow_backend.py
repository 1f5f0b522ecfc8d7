"""MLflow as a log backend: an optional dependency, imported when a run opens the backend.
See docs/tools.md.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from libai.registry import LOG_BACKENDS

from .backends import Histogram, _BatchedBackend, flatten_config
from .trackers import exit_status, import_tracker, read_json, reopen, write_json

__all__ = ["MLflowBackend"]

_logger = logging.getLogger("libai")


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
        self._mlflow = import_tracker("MLflowBackend", "mlflow", "mlflow")
        reopen(self, log_dir, resume_step)

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
        earlier = read_json(state_file) if self._resume else {}
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
        write_json(state_file, {"tracking_uri": uri, "experiment_id": exp_id, "run_id": run_id})

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
            client, self.client = self.client, None
            try:
                client.set_terminated(self.run_id, status=exit_status())
            except Exception as e:  # the run is over: a tracker must not fail it now
                _logger.warning(f"MLflowBackend: could not end the MLflow run "
                                f"({type(e).__name__}: {e}).")
        self._mlflow = None
