"""Where LoggerHook writes scalars: a JSON-lines file and TensorBoard event files (here), and the
experiment trackers Weights & Biases and MLflow (optional dependencies, in ``wandb_backend.py``
and ``mlflow_backend.py``).

A backend is opened once per run with the folder of the run's series (its own run folder, or
after a resume the folder of the series it continues) and the last iteration the restored state
had reached: what a previous attempt wrote *after* that step is hidden or set aside, so that
curves neither repeat nor go backwards. Steps are train iterations (the
number completed), for validation metrics too.

To add a backend, subclass :class:`BaseLogBackend`, register it with
``@LOG_BACKENDS.register_module()`` and list it in ``LoggerHook(backends=[dict(type=...)])``.
Besides scalars a backend may take the run's config (``log_config``, right after ``open``),
histograms (``add_histogram``, from HistogramHook) and the final values with the best
checkpoint (``log_summary``, before ``close``); by default it ignores them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from typing import Any

from libai.registry import LOG_BACKENDS

from .histogram import Histogram

__all__ = [
    "BaseLogBackend",
    "Histogram",
    "JsonlBackend",
    "TensorboardBackend",
    "default_backends",
    "flatten_config",
    "log_run_config",
    "log_run_summary",
]

_logger = logging.getLogger("libai")


class BaseLogBackend:
    """Interface of a scalar sink. Only rank 0 opens and writes backends."""

    def open(self, log_dir: str, resume_step: int | None = None) -> None:
        """Prepare to write into ``log_dir``.

        Args:
            log_dir: The run's log folder (exists).
            resume_step: The step training resumes from; entries with a larger step that an
                earlier attempt left behind must be dropped. Defaults to None (a fresh run).
        """

    def add_scalars(self, scalars: dict[str, float], step: int) -> None:
        """Record ``{tag: value}`` at ``step``."""
        raise NotImplementedError(f"{type(self).__name__} must implement add_scalars")

    def flush(self) -> None:
        """Write what was added so far to disk (LoggerHook calls it before each checkpoint)."""

    def close(self) -> None:
        """Flush and release files."""

    def log_config(
        self,
        config: Mapping[str, Any],
        *,
        experiment_name: str | None = None,
        run_name: str | None = None,
    ) -> None:
        """The run's config (``runner.cfg.to_dict()``), once, right after :meth:`open`.

        Args:
            config: The config as nested dicts and lists.
            experiment_name: The config's ``experiment_name``, else its file's stem.
            run_name: The run's timestamp (the name of its log folder).

        Defaults to ignoring it.
        """

    def add_histogram(self, tag: str, values: Any, step: int) -> None:
        """Record the distribution of ``values`` (a tensor, an array or a :class:`Histogram`)
        at ``step``. Defaults to ignoring it; HistogramHook only sends to backends that
        override it."""

    def log_summary(self, metrics: Mapping[str, float], best: Mapping[str, Any] | None = None) -> None:
        """At the end of the run, before :meth:`close`: the last value of every scalar logged,
        and the best checkpoint (``{"checkpoint": absolute path, "metric": "val/accuracy",
        "score": 0.93}``; None without ``CheckpointHook(save_best=...)``). Defaults to ignoring
        them."""


def flatten_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Nested config dicts as one level of dotted keys, the form trackers filter and compare.

    ``{"model": {"type": "Net"}, "custom_hooks": [{"type": "EMAHook"}], "_tmp": 1}`` gives
    ``{"model.type": "Net", "custom_hooks.0.type": "EMAHook"}``: lists holding dicts are
    numbered, other lists stay lists, values that are not numbers, strings, booleans, None or
    lists become their ``repr``; top-level helper variables (``_name``) are left out.
    """
    out: dict[str, Any] = {}

    def walk(value: Any, key: str) -> None:
        if isinstance(value, Mapping):
            if not value:
                out[key] = {}
            for k, v in value.items():
                walk(v, f"{key}.{k}")
        elif isinstance(value, list | tuple) and any(isinstance(v, Mapping) for v in value):
            for i, v in enumerate(value):
                walk(v, f"{key}.{i}")
        elif isinstance(value, list | tuple):
            out[key] = [v if _plain(v) else repr(v) for v in value]
        else:
            out[key] = value if _plain(value) else repr(value)

    for k, v in config.items():
        if not str(k).startswith("_"):
            walk(v, str(k))
    return out


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


class _BatchedBackend(BaseLogBackend):
    """Keeps added rows and writes them together: every ``flush_secs``, on ``flush()`` (before
    each checkpoint save) and on ``close()`` (the end of the run, also by an exception or
    Ctrl-C). Written one by one between training steps, with the caches cold, a row costs
    several times more. Subclasses implement ``_accepts`` and ``_write_rows``."""

    def __init__(self, flush_secs: float) -> None:
        self.flush_secs = flush_secs
        self._pending: list[tuple[int, float, dict[str, float]]] = []  # (step, wall time, row)
        self._flushed_at = time.monotonic()
        self._lost = False  # a write failed: this backend is off for the rest of the run

    def _accepts(self) -> bool:
        """Whether rows are kept (False: the backend is off and drops them)."""
        raise NotImplementedError

    def _write_rows(self, rows: list[tuple[int, float, dict[str, float]]]) -> None:
        raise NotImplementedError

    def add_scalars(self, scalars: dict[str, float], step: int) -> None:
        if self._lost or not self._accepts():
            return
        self._pending.append((int(step), time.time(), dict(scalars)))
        if time.monotonic() - self._flushed_at >= self.flush_secs:
            self.flush()

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and not self._lost:
            try:
                self._write_rows(pending)
            except Exception as e:  # a full disk, a tracker's server: measuring must not end
                self._lose(f"scalars lost from step {pending[0][0]} on", e)  # the run
        self._flushed_at = time.monotonic()

    def _lose(self, what: str, e: Exception) -> None:
        """One warning line, then this backend writes no more (a second failure says nothing)."""
        if not self._lost:
            self._lost = True
            _logger.warning(f"{type(self).__name__}: {what} ({type(e).__name__}: {e}); "
                            f"training goes on.")

    def _close_file(self, file: Any) -> None:
        """Close ``file``; the error of a backend already lost (the same full disk) is not
        said twice, and none is raised: the run has ended, a scalar file must not fail it."""
        try:
            file.close()
        except Exception as e:
            self._lose("the last scalars are lost", e)


@LOG_BACKENDS.register_module()
class JsonlBackend(_BatchedBackend):
    """One JSON object per line: ``{"step": 120, "train/loss": 0.43, "train/lr": 0.001}``.

    Rows are kept in memory and written every ``flush_secs``, before each checkpoint save and
    when the run ends, also by an exception or Ctrl-C (written one by one between training
    steps, with cold caches, each costs several times more). So after a resume the file is
    complete up to the checkpoint; only a killed process loses at most ``flush_secs`` of rows.
    Reopened after a resume, the lines with ``step > resume_step`` are left out of the file
    (rewritten through a temporary file and an atomic rename); the file as it was stays
    beside it as ``scalars.jsonl.1`` (then ``.2`` ...): nothing a run logged is ever cut.

    Args:
        filename: File name inside the log folder. Defaults to 'scalars.jsonl'.
        flush_secs: Longest time added rows wait before reaching the file. Defaults to 10.
    """

    def __init__(self, filename: str = "scalars.jsonl", flush_secs: float = 10) -> None:
        super().__init__(flush_secs)
        self.filename = filename
        self.path: str | None = None
        self._file: Any = None

    def open(self, log_dir: str, resume_step: int | None = None) -> None:
        self.path = os.path.join(log_dir, self.filename)
        if resume_step is not None and os.path.exists(self.path):
            self._truncate(self.path, resume_step)
        self._file = open(self.path, "a", encoding="utf-8")
        self._flushed_at = time.monotonic()

    @staticmethod
    def _truncate(path: str, resume_step: int) -> None:
        kept, dropped = [], 0
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:  # a line cut short by a crash
                    dropped += 1
                    continue
                if isinstance(row, dict) and row.get("step", -1) <= resume_step:
                    kept.append(line if line.endswith("\n") else line + "\n")
                else:
                    dropped += 1
        if dropped:  # the file as it was is kept, as scalars.jsonl.1 (.2, ...), never cut
            tmp = f"{path}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(kept)
            n = 1
            while os.path.exists(f"{path}.{n}"):
                n += 1
            try:
                os.link(path, f"{path}.{n}")
            except OSError:  # a file system without hard links
                shutil.copyfile(path, f"{path}.{n}")
            os.replace(tmp, path)

    def _accepts(self) -> bool:
        if self._file is None:
            raise RuntimeError("JsonlBackend.add_scalars called before open()")
        return True

    def _write_rows(self, rows: list[tuple[int, float, dict[str, float]]]) -> None:
        self._file.write("".join(json.dumps({"step": step, **row}) + "\n" for step, _, row in rows))
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            file, self._file = self._file, None
            self._close_file(file)


_tb_warned = False


@LOG_BACKENDS.register_module()
class TensorboardBackend(_BatchedBackend):
    """TensorBoard event files (``events.out.tfevents.*``) in ``<log dir>/<dirname>``.

    Written by libai's own event writer (``tb_events.EventFileWriter``): the same records as
    ``torch.utils.tensorboard.SummaryWriter``, framed in the training thread instead of a writer
    thread that competes with training for the GIL. After a resume the file starts with a purge
    marker at ``resume_step + 1``: TensorBoard then hides what an earlier attempt logged past the
    resumed step. Without the ``tensorboard`` package this backend warns once and writes
    nothing. It also writes the histograms of HistogramHook.

    Events are kept and written every ``flush_secs``, before each checkpoint save and at the
    end of the run, not at every write.

    Args:
        dirname: Folder inside the log folder. Defaults to 'tensorboard'.
        flush_secs: Longest time written scalars wait before reaching the file. Defaults to 10.
    """

    def __init__(self, dirname: str = "tensorboard", flush_secs: int = 10) -> None:
        super().__init__(flush_secs)
        self.dirname = dirname
        self.log_dir: str | None = None
        self._writer: Any = None

    def open(self, log_dir: str, resume_step: int | None = None) -> None:
        global _tb_warned
        from .tb_events import EventFileWriter

        self.log_dir = os.path.join(log_dir, self.dirname)
        purge = None if resume_step is None else resume_step + 1
        self._flushed_at = time.monotonic()
        try:
            self._writer = EventFileWriter(self.log_dir, purge_step=purge)
        except ImportError:
            if not _tb_warned:
                _tb_warned = True
                _logger.warning(
                    "TensorBoard logging is off: the 'tensorboard' package is not installed "
                    "(pip install tensorboard). Scalars still go to scalars.jsonl."
                )

    def _accepts(self) -> bool:
        return self._writer is not None

    def _write_rows(self, rows: list[tuple[int, float, dict[str, float]]]) -> None:
        for step, wall_time, row in rows:
            self._writer.add_scalars(row, step, wall_time=wall_time)
        self._writer.flush()

    def add_histogram(self, tag: str, values: Any, step: int) -> None:
        """A TensorBoard histogram (the HISTOGRAMS and DISTRIBUTIONS tabs) of ``values``."""
        if self._writer is None or self._lost:
            return
        hist = Histogram.of(values)
        if hist is None:
            return
        if self._pending:  # keep the file in step order
            self.flush()
        try:
            self._writer.add_histogram(tag, hist, step)
        except Exception as e:  # measuring must not end the run
            self._lose(f"histograms and scalars lost from step {step} on", e)

    def close(self) -> None:
        if self._writer is not None:
            self.flush()
            writer, self._writer = self._writer, None
            self._close_file(writer)


def log_run_config(
    backends: list[BaseLogBackend],
    config: Any,
    *,
    experiment_name: str | None = None,
    run_name: str | None = None,
) -> None:
    """Give the run's config and names (see :meth:`BaseLogBackend.log_config`) to the backends
    that take them (LoggerHook, once the backends are open). ``config`` is a ``Config``
    (converted with ``to_dict()`` only if a backend takes it), a mapping or None."""
    takers = [b for b in backends if type(b).log_config is not BaseLogBackend.log_config]
    if not takers:
        return
    config = config.to_dict() if hasattr(config, "to_dict") else dict(config or {})
    for backend in takers:
        try:
            backend.log_config(config, experiment_name=experiment_name, run_name=run_name)
        except Exception as e:  # a tracker's server: measuring must not end the run
            if isinstance(backend, _BatchedBackend):
                backend._lost = True  # not started: one line says so, not one per flush
            _logger.warning(f"{type(backend).__name__}: could not start (logging the run's "
                            f"config: {type(e).__name__}: {e}); its scalars are lost, "
                            f"training goes on.")


def log_run_summary(
    backends: list[BaseLogBackend],
    metrics: Mapping[str, float],
    best: Mapping[str, Any] | None = None,
) -> None:
    """Give the final values and the best checkpoint (see :meth:`BaseLogBackend.log_summary`)
    to the backends that take them (LoggerHook, before closing them). A failure is logged,
    never raised: the backends must still close."""
    takers = [b for b in backends if type(b).log_summary is not BaseLogBackend.log_summary]
    for backend in takers:
        try:
            backend.log_summary(dict(metrics), best)
        except Exception as e:
            _logger.warning(f"{type(backend).__name__}: could not log the run's summary "
                            f"({type(e).__name__}: {e}).")


def default_backends() -> list[dict]:
    """JSON lines, and TensorBoard (which only warns, once, when the package is missing)."""
    return [dict(type="JsonlBackend"), dict(type="TensorboardBackend")]
