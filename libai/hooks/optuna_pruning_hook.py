"""OptunaPruningHook: report validation metrics to an Optuna trial and stop when it is pruned."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

from libai.registry import HOOKS
from libai.utils.errors import ConfigError
from libai.utils.optuna_study import build_pruner, open_storage
from libai.utils.suggest import did_you_mean

from .hook import Hook, RunnerView

__all__ = ["OptunaPruningHook", "PRUNED_MARKER"]

# Written into the work dir when the trial is pruned; tools/sweep.py maps it to TrialState.PRUNED.
PRUNED_MARKER = "optuna_pruned.json"


@HOOKS.register_module()
class OptunaPruningHook(Hook):
    """Report ``monitor`` to an Optuna trial after each validation; stop the run when pruned.

    The trial lives in an Optuna storage shared with the process that drives the study
    (``tools/sweep.py`` adds this hook to each trial's config). After every validation during
    training (``after_val_epoch``, once per validation set: the set holding ``monitor``
    reports), the value is reported with ``trial.report(value, step=runner.iter)`` and the
    pruner is asked ``should_prune()``. When it says so, ``runner.should_stop`` is set (the run
    ends after the current iteration or epoch, as with EarlyStoppingHook) and
    ``optuna_pruned.json`` (step, value) is written into the work dir: the study driver then
    marks the trial PRUNED. The trial itself is left RUNNING for the driver to finish.

    The pruner is not stored in an Optuna study, so it is given here as a config dict naming any
    class of ``optuna.pruners`` with its arguments; it sees the other trials' reported values
    through the storage.

    Args:
        storage: Storage URL of the study, e.g. ``'sqlite:////abs/path/study.db'``.
        study_name: Name of the study in that storage.
        trial_number: Number of this run's trial in the study.
        monitor: The metric to report, with its prefix (``'val/accuracy'``).
        pruner: ``dict(type='MedianPruner', n_warmup_steps=1)`` or any other class of
            ``optuna.pruners``. Defaults to None: report only, never prune.

    Needs optuna (``pip install optuna``); it is imported when training starts.
    """

    priority = "LOW"

    def __init__(
        self,
        storage: str,
        study_name: str,
        trial_number: int,
        monitor: str,
        pruner: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(storage, str) or "://" not in storage:
            raise ConfigError(f"OptunaPruningHook: storage must be a database URL such as "
                              f"'sqlite:////path/study.db', got {storage!r}.")
        if not isinstance(study_name, str) or not study_name:
            raise ConfigError(f"OptunaPruningHook: study_name must be a name, got {study_name!r}.")
        if isinstance(trial_number, bool) or not isinstance(trial_number, int) or trial_number < 0:
            raise ConfigError(f"OptunaPruningHook: trial_number must be an int >= 0, got "
                              f"{trial_number!r}.")
        if not isinstance(monitor, str) or not monitor:
            raise ConfigError(f"OptunaPruningHook: monitor must be a metric name, got {monitor!r}.")
        if pruner is not None and (not isinstance(pruner, Mapping)
                                   or not isinstance(pruner.get("type"), str)):
            raise ConfigError(f"OptunaPruningHook: pruner must be a dict such as "
                              f"dict(type='MedianPruner', n_warmup_steps=1), got {pruner!r}.")
        self.storage = storage
        self.study_name = study_name
        self.trial_number = trial_number
        self.monitor = monitor
        self.pruner = None if pruner is None else dict(pruner)
        self.pruned = False
        self._trial: Any = None
        self._training = False
        self._reported = False
        self._warned_missing = False

    # ------------------------------------------------------------------------ lifecycle

    def before_train(self, runner: RunnerView) -> None:
        self._training = True
        if self._trial is None:
            self._trial = self._connect()

    def after_train(self, runner: RunnerView) -> None:
        self._training = False

    def after_val_epoch(self, runner: RunnerView, metrics: Mapping[str, float] | None = None) -> None:
        if not self._training or self.pruned or self.monitor not in (metrics or {}):
            return
        import optuna

        value = float(metrics[self.monitor])
        step = int(runner.iter)
        self._reported = True
        try:
            self._trial.report(value, step)
            prune = math.isfinite(value) and self._trial.should_prune()
        except (RuntimeError, optuna.exceptions.OptunaError) as e:
            # the trial was finished by someone else (the sweep was restarted): stop, it is moot
            runner.should_stop = True
            runner.logger.warning(f"OptunaPruningHook: cannot report to trial "
                                  f"{self.trial_number} ({e}); stopping the run.")
            return
        if prune:
            self.pruned = True
            runner.should_stop = True
            runner.logger.warning(
                f"Optuna pruned trial {self.trial_number} at iteration {step}: "
                f"{self.monitor} = {value:.6g}. Training stops here.")
            self._write_marker(runner, step, value)

    def after_val(self, runner: RunnerView, metrics: Mapping[str, float] | None = None) -> None:
        if self._training and not self._reported and not self._warned_missing:
            self._warned_missing = True
            names = list(metrics or {})
            runner.logger.warning(
                f"OptunaPruningHook: metric '{self.monitor}' is not among the validation "
                f"metrics ({', '.join(sorted(names)) or 'none'}), so nothing is reported and "
                f"the trial is never pruned.{did_you_mean(self.monitor, names)}")

    # ---------------------------------------------------------------------------- helpers
    def _connect(self) -> Any:
        """The running trial, from the shared storage."""
        try:
            import optuna
        except ImportError:
            raise ConfigError("OptunaPruningHook needs optuna: pip install optuna") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = open_storage(self.storage)
        study = optuna.load_study(study_name=self.study_name, storage=storage,
                                  sampler=optuna.samplers.RandomSampler(),
                                  pruner=build_pruner(self.pruner))
        try:
            study_id = storage.get_study_id_from_name(self.study_name)
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, self.trial_number)
        except KeyError:
            raise ConfigError(f"OptunaPruningHook: study '{self.study_name}' has no trial "
                              f"{self.trial_number}.") from None
        return optuna.Trial(study, trial_id)

    @staticmethod
    def _write_marker(runner: RunnerView, step: int, value: float) -> None:
        path = os.path.join(runner.work_dir, PRUNED_MARKER)
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"step": step, "value": value}, f)
        os.replace(tmp, path)
