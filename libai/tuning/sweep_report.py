"""The end of a sweep: the table of trials, ``trials.csv``, ``best_config.py`` and Optuna's
plots (:func:`report`)."""

from __future__ import annotations

import csv
import os
import sys
from typing import Any

from libai.config import Config

from .sweep_file import Sweep

__all__ = ["report", "sorted_trials", "write_best_config", "write_csv", "write_plots"]


def _show(path: str) -> str:
    """A path as short as it is clear: relative below the current folder, else absolute."""
    if path.startswith("libai::"):
        return path
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:.4g}"
        return text if any(c in text for c in ".enN") else text + ".0"  # 0.0, not 0
    return repr(value) if isinstance(value, str) else str(value)


def _duration(t: Any) -> str:
    if t.datetime_start is None or t.datetime_complete is None:
        return "-"
    return f"{(t.datetime_complete - t.datetime_start).total_seconds():.1f} s"



# ------------------------------------------------------------------------------ report
def sorted_trials(study: Any, sweep: Sweep) -> list[Any]:
    order = {"COMPLETE": 0, "PRUNED": 1, "FAIL": 2}
    sign = -1 if sweep.mode == "max" else 1

    def key(t: Any) -> tuple:
        value = t.value if t.state.name == "COMPLETE" and t.value is not None else 0.0
        return order.get(t.state.name, 3), sign * value, t.number

    return sorted(study.get_trials(deepcopy=False), key=key)


def _note(t: Any, reruns: dict[int, int]) -> str:
    note = t.user_attrs.get("note", "")
    if t.number in reruns:
        note += f" (run again as trial {reruns[t.number]})"
    elif t.user_attrs.get("interrupted"):
        note += " (runs again when the sweep resumes)"
    return note


def _reruns(trials: list[Any]) -> dict[int, int]:
    """{interrupted trial: the trial that re-ran it}."""
    return {t.user_attrs["retry_of"]: t.number for t in trials if "retry_of" in t.user_attrs}


def print_table(trials: list[Any], sweep: Sweep) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"Sweep {sweep.study_name}: {len(trials)} trial(s), best first")
    table.add_column("trial", justify="right")
    table.add_column("state")
    table.add_column(sweep.metric, justify="right")
    for p in sweep.params:
        table.add_column(p.name, justify="right")
    table.add_column("time", justify="right")
    table.add_column("note", overflow="fold", max_width=60)
    reruns = _reruns(trials)
    for t in trials:
        value = "" if t.value is None or t.state.name != "COMPLETE" else f"{t.value:.6g}"
        params = [_fmt(p.decode(t.params[p.name])) if p.name in t.params else ""
                  for p in sweep.params]
        table.add_row(str(t.number), t.state.name, value, *params, _duration(t),
                      _note(t, reruns))
    console.print(table)


def write_csv(trials: list[Any], sweep: Sweep, path: str) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["number", "state", sweep.metric, *(p.name for p in sweep.params),
                         "duration_s", "work_dir", "note"])
        reruns = _reruns(trials)
        for t in trials:
            seconds = ("" if t.datetime_start is None or t.datetime_complete is None else
                       f"{(t.datetime_complete - t.datetime_start).total_seconds():.2f}")
            writer.writerow([t.number, t.state.name, "" if t.value is None else repr(t.value),
                             *(repr(p.decode(t.params[p.name])) if p.name in t.params else ""
                               for p in sweep.params),
                             seconds, t.user_attrs.get("work_dir", ""), _note(t, reruns)])


def write_best_config(best: Any, sweep: Sweep, path: str) -> None:
    """The config as the best trial ran it (fixed options and its values), for train.py."""
    cfg = sweep.trial_config({p.name: p.decode(best.params[p.name]) for p in sweep.params})
    cfg.work_dir = _show(os.path.join(sweep.study_dir, "best"))  # not the base config's
    keep = Config({k: v for k, v in cfg.to_dict().items() if not str(k).startswith("_")},
                  filename=cfg.filename)
    keep.dump(path)
    values = ", ".join(f"{p.name}={_fmt(p.decode(best.params[p.name]))}" for p in sweep.params)
    head = (f"# Best trial ({best.number}) of sweep '{sweep.study_name}' ({sweep.path}):\n"
            f"# {sweep.metric} = {best.value:.6g} with {values}\n"
            f"# {sweep.config} with the sweep's fixed options and these values merged in;\n"
            f"# work_dir: {cfg.work_dir}.\n")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + text)


def write_plots(study: Any, sweep: Sweep) -> list[str]:
    """Optuna's matplotlib plots; a plot that cannot be drawn is skipped with a note."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna
    from optuna.visualization import matplotlib as ovm

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    target = sweep.metric
    plots: list[tuple[str, Any]] = []
    if complete:
        plots.append(("optimization_history.png", lambda: ovm.plot_optimization_history(
            study, target_name=target)))
    varied = [p.name for p in sweep.params
              if len({repr(t.params.get(p.name)) for t in complete}) > 1]
    if len(complete) >= 2 and varied:
        plots.append(("param_importances.png", lambda: ovm.plot_param_importances(
            study, evaluator=_importance_evaluator(), params=varied, target_name=target)))
    if any(t.intermediate_values for t in study.get_trials(deepcopy=False)):
        plots.append(("intermediate_values.png", lambda: ovm.plot_intermediate_values(study)))
    written = []
    for name, draw in plots:
        path = os.path.join(sweep.study_dir, name)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ExperimentalWarning and friends
                ax = draw()
            fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
            fig.set_size_inches(7, 4.2)
            fig.tight_layout()
            fig.savefig(path, dpi=90)
            plt.close(fig)
            written.append(path)
        except Exception as e:  # a plot never fails a finished sweep
            print(f"note: could not draw {name} ({type(e).__name__}: {e})")
        finally:
            plt.close("all")
    return written


def _importance_evaluator() -> Any:
    import optuna

    try:
        import sklearn  # noqa: F401 - fANOVA fits a random forest
    except ImportError:
        return optuna.importance.PedAnovaImportanceEvaluator()
    return optuna.importance.FanovaImportanceEvaluator(seed=0)


def report(study: Any, sweep: Sweep) -> None:
    trials = sorted_trials(study, sweep)
    if not trials:
        print("No trials yet.")
        return
    print_table(trials, sweep)
    csv_path = os.path.join(sweep.study_dir, "trials.csv")
    write_csv(trials, sweep, csv_path)
    written = [csv_path]
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    if complete:
        best = complete[0]
        best_path = os.path.join(sweep.study_dir, "best_config.py")
        write_best_config(best, sweep, best_path)
        written.append(best_path)
    written += write_plots(study, sweep)
    counts: dict[str, int] = {}
    for t in trials:
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    print("Trials: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    if complete:
        best = complete[0]
        values = "  ".join(f"{p.name}={_fmt(p.decode(best.params[p.name]))}"
                           for p in sweep.params)
        print(f"Best: trial {best.number}, {sweep.metric} = {best.value:.6g}: {values}")
        print(f"Train it: python tools/train.py {_show(written[1])}")
    else:
        print("No trial completed: see the notes above and trial_N/stderr.txt.")
    print("Wrote: " + ", ".join(_show(p) for p in written))


