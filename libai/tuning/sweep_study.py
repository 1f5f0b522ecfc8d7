"""The Optuna study of a sweep: opened (or resumed, refused when the sweep changed), the trials
that a killed sweep left running recovered, and the trials still to run counted (see
:mod:`libai.tuning.sweep`)."""

from __future__ import annotations

import json
from typing import Any

from libai.utils.errors import ConfigError

from .sweep_file import Sweep

__all__ = ["open_study", "recover", "remaining"]


def open_study(sweep: Sweep, storage: Any, pruner: Any) -> Any:
    """Create the sweep's study in ``storage``, or load it when it exists; a ConfigError when
    the stored study was started by another sweep or towards the other direction."""
    import optuna

    direction = "maximize" if sweep.mode == "max" else "minimize"
    existing = _existing_trials(sweep, storage)
    study = optuna.create_study(
        study_name=sweep.study_name, storage=storage, sampler=_sampler(sweep, existing),
        pruner=pruner, direction=direction, load_if_exists=True)
    saved = study.user_attrs.get("sweep")
    if saved is None:
        study.set_user_attr("sweep", sweep.signature())
    elif saved != json.loads(json.dumps(sweep.signature())):
        changed = [k for k in sweep.signature() if saved.get(k) != json.loads(
            json.dumps(sweep.signature()[k]))]
        raise ConfigError(
            f"{sweep.study_dir} holds study '{sweep.study_name}' of a different sweep "
            f"({', '.join(changed)} changed). Resume it with the sweep file it was started "
            f"with, or give another --study-dir.")
    if study.direction.name.lower() != direction:
        raise ConfigError(f"study '{sweep.study_name}' was created to "
                          f"{study.direction.name.lower()} the metric, not to {direction} "
                          f"it; give another --study-dir.")
    return study


def _existing_trials(sweep: Sweep, storage: Any) -> int:
    try:
        study_id = storage.get_study_id_from_name(sweep.study_name)
    except KeyError:
        return 0
    return len(storage.get_all_trials(study_id, deepcopy=False))


def _sampler(sweep: Sweep, existing: int) -> Any:
    from optuna import samplers

    if sweep.strategy == "grid":  # the same seed on resume: it orders the grid
        return samplers.GridSampler(sweep.search_space, seed=sweep.seed)
    seed = sweep.seed + existing  # a resumed sweep does not replay its first samples
    if sweep.strategy == "random":
        return samplers.RandomSampler(seed=seed)
    startup = max(2, min(10, sweep.trials // 3))
    return samplers.TPESampler(seed=seed, n_startup_trials=startup)


def recover(study: Any, storage: Any) -> int:
    """Mark trials left RUNNING by a killed sweep as FAIL (interrupted) and queue a re-run
    of every interrupted trial not re-run yet; returns how many were queued."""
    import optuna

    TrialState = optuna.trial.TrialState
    study_id = storage.get_study_id_from_name(study.study_name)
    trials = study.get_trials(deepcopy=False)
    for t in trials:
        if t.state == TrialState.RUNNING:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
            storage.set_trial_user_attr(trial_id, "interrupted", True)
            storage.set_trial_user_attr(trial_id, "note", "interrupted: the sweep stopped")
            storage.set_trial_state_values(trial_id, TrialState.FAIL)
    trials = study.get_trials(deepcopy=False)
    retried = {t.user_attrs.get("retry_of") for t in trials}
    queued = 0
    for t in trials:
        if (t.state == TrialState.FAIL and t.user_attrs.get("interrupted")
                and t.number not in retried):
            system = {k: v for k, v in t.system_attrs.items() if k != "fixed_params"}
            study.add_trial(optuna.trial.create_trial(
                state=TrialState.WAITING, params=t.params, distributions=t.distributions,
                user_attrs={"retry_of": t.number}, system_attrs=system))
            queued += 1
    return queued


def remaining(study: Any, sweep: Sweep) -> int:
    """Trials still to run: grid points with no finished run, or trials short of the
    target (interrupted ones do not count as run)."""
    done = [t for t in study.get_trials(deepcopy=False) if _done(t)]
    if sweep.strategy == "grid":
        return sweep.grid_size - len({t.system_attrs.get("grid_id") for t in done})
    return sweep.trials - len(done)


def _done(t: Any) -> bool:
    from optuna.trial import TrialState

    if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return t.state == TrialState.FAIL and not t.user_attrs.get("interrupted")
