"""tools/sweep.py and OptunaPruningHook: sweeps of tiny digits runs, as a user runs them.

The sweep runs in this process (run_tool: the same main(argv)), except the one that is killed;
its trials are always `libai train` processes of their own."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

optuna = pytest.importorskip("optuna")

from libai.config import Config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "sweep.py")
DIGITS = os.path.join(ROOT, "configs", "digits_mlp.py")
LR = "optim_wrapper.optimizer.lr"
# 60 iterations (about a second of training), validated every 20; nothing slow at the end
FAST = ["train_cfg.max_iters=60", "train_cfg.val_interval=20", "param_scheduler.0.end=10",
        "param_scheduler.1.begin=10", "default_hooks.checkpoint=None",
        "+default_hooks.logger.plot=False"]


def write_sweep(path, **keys):
    keys = {"config": DIGITS, "metric": dict(key="val/accuracy", mode="max"),
            "strategy": "grid", "cfg_options": FAST, **keys}
    path.write_text("".join(f"{k} = {v!r}\n" for k, v in keys.items()))
    return str(path)


@pytest.fixture
def sweep(run_tool, run_process):
    """``sweep(*args, cwd=)``: tools/sweep.py in this process. Its trials are processes
    (run_process: the test is slow); a sweep that stops before its trials needs only run_tool."""
    return lambda *args, cwd: run_tool(TOOL, *args, cwd=cwd)


def load(study_dir, name):
    storage = f"sqlite:///{os.path.join(study_dir, 'study.db')}"
    return optuna.load_study(study_name=name, storage=storage)


def grid_seed_running_first(choices, first, then):
    """A seed for which Optuna's GridSampler runs ``first`` before ``then`` (it shuffles)."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for seed in range(50):
        study = optuna.create_study(
            sampler=optuna.samplers.GridSampler({LR: choices}, seed=seed))
        order = [study.ask().suggest_categorical(LR, choices) for _ in choices]
        if order.index(first) < order.index(then):
            return seed
    raise AssertionError("no seed orders the grid as needed")


def test_grid_finds_best_prunes_the_worse_and_survives_a_crash(sweep, tmp_path):
    """Also: `--cfg-options` applies to every trial after the file's options (a default hook
    without `+`), and a sweep says where each trial is while it runs (issue 27)."""
    choices = [3e-3, 1e-5, "oops"]  # 'oops' is no learning rate: that trial crashes
    seed = grid_seed_running_first(choices, 3e-3, 1e-5)  # a median exists when 1e-5 runs
    # the file makes trials of 2000 iterations; --cfg-options brings them back to FAST's 60
    path = write_sweep(tmp_path / "lr.py", params={LR: dict(choices=choices)}, seed=seed,
                       pruner=dict(type="MedianPruner", n_startup_trials=1, n_warmup_steps=0),
                       cfg_options=["train_cfg.max_iters=2000"])
    study_dir = tmp_path / "study"
    out = sweep(path, "--study-dir", study_dir, "--cfg-options", *FAST,
                "default_hooks.throughput=None", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    trials = {t.params[LR]: t for t in load(study_dir, "lr").trials}
    assert sorted(map(repr, trials)) == sorted(map(repr, choices))  # each point once
    good, bad, crash = trials[3e-3], trials[1e-5], trials["oops"]
    assert good.state.name == "COMPLETE" and good.value > 0.5
    # pruned at the first validation: the median of the finished trial is far above it
    assert bad.state.name == "PRUNED", bad.user_attrs
    assert bad.user_attrs["note"].startswith("pruned at step 20")
    assert bad.intermediate_values and max(bad.intermediate_values) == 20
    # the crash: FAIL with the end of its stderr, and the sweep went on
    assert crash.state.name == "FAIL"
    assert "exit status 2" in crash.user_attrs["note"] and "AdamW" in crash.user_attrs["note"]
    # the report: table, csv, best config, plots
    assert "COMPLETE" in out.stdout and "PRUNED" in out.stdout and "FAIL" in out.stdout
    assert f"Best: trial {good.number}, val/accuracy = " in out.stdout
    with open(study_dir / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["state"] for r in rows] == ["COMPLETE", "PRUNED", "FAIL"]
    assert rows[0][LR] == "0.003" and float(rows[0]["val/accuracy"]) == good.value
    best = Config.fromfile(str(study_dir / "best_config.py"))
    assert best.optim_wrapper.optimizer.lr == 3e-3 and best.train_cfg.max_iters == 60
    assert best.default_hooks.throughput is None and "train_cfg.max_iters=60" in \
        good.user_attrs["command"]
    assert "custom_hooks" not in best  # the pruning hook is the sweep's, not the config's
    # not a terminal: one line per new value of the metric, with the trial's place and step
    place = f"({good.number + 1}/3)"
    assert f"trial {good.number} started {place}: " in out.stdout
    assert re.search(rf"trial {good.number} {re.escape(place)}: step \d+/60, val/accuracy 0\.\d+",
                     out.stdout), out.stdout
    assert f"trial {good.number} complete {place}: val/accuracy = " in out.stdout
    for name in ("optimization_history.png", "intermediate_values.png"):
        assert (study_dir / name).stat().st_size > 5000, name
    assert not (study_dir / "param_importances.png").exists()  # needs 2 complete trials
    # the best config trains as it is (what tools/train.py --fast-dev-run does)
    from libai.runner import Runner

    best.work_dir = str(tmp_path / "best")
    Runner.from_cfg(best, fast_dev_run=2).train()


def test_resumes_after_a_kill_without_running_a_point_twice(sweep, tmp_path):
    path = write_sweep(tmp_path / "resume.py", params={LR: [1e-5, 3e-3]})
    study_dir = tmp_path / "study"
    cmd = [sys.executable, TOOL, path, "--study-dir", str(study_dir)]
    # a real process (killed), in a session of its own: killing its process group also kills
    # the running trial; the runs that resume it are in this process
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines = []
    try:
        deadline = time.monotonic() + 240
        for line in proc.stdout:
            lines.append(line)
            if "trial 1 started" in line or time.monotonic() > deadline:
                break
        assert any("trial 0 complete" in line for line in lines), "".join(lines)
        time.sleep(1.0)  # trial 1 is training now
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    study = load(study_dir, "resume")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING"]

    out = sweep(path, "--study-dir", str(study_dir), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 interrupted one(s) queued to run again; 1 to run" in out.stdout
    trials = load(study_dir, "resume").trials
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert sorted(t.params[LR] for t in complete) == [1e-5, 3e-3]  # the whole grid, once each
    killed = trials[1]
    assert killed.state.name == "FAIL" and killed.user_attrs["interrupted"]
    assert [t.user_attrs.get("retry_of") for t in trials] == [None, None, 1]
    assert "run again as trial 2" in out.stdout
    assert (study_dir / "param_importances.png").stat().st_size > 5000
    # nothing left to do: a third run only reports
    again = sweep(path, "--study-dir", str(study_dir), cwd=tmp_path)
    assert again.returncode == 0 and "Nothing to run" in again.stdout
    assert len(load(study_dir, "resume").trials) == 3


def test_bad_sweep_files_are_one_line(run_tool, tmp_path):
    path = write_sweep(tmp_path / "bad.py",
                       params={LR: dict(type="float", low=1e-4, high=1e-2, log=True)})
    out = run_tool(TOOL, path, "--study-dir", str(tmp_path / "s"), cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "strategy='grid' needs the values of every parameter" in out.stderr
    assert "without a step" in out.stderr
    path = write_sweep(tmp_path / "typo.py", params={"optim_wrapper.optimizer.lrr": [1e-3]})
    out = run_tool(TOOL, path, "--study-dir", str(tmp_path / "s"), cwd=tmp_path)
    assert out.returncode == 2 and "Did you mean 'lr'" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_trial_timeout_and_a_changed_sweep_is_not_resumed(sweep, tmp_path):
    study_dir = tmp_path / "study"
    path = write_sweep(tmp_path / "s.py", params={LR: [1e-3]}, trial_timeout=0.01)
    out = sweep(path, "--study-dir", str(study_dir), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    (trial,) = load(study_dir, "s").trials
    assert trial.state.name == "FAIL" and trial.user_attrs["note"] == "timed out after 0.01 s"
    assert "No trial completed" in out.stdout
    write_sweep(tmp_path / "s.py", params={LR: [1e-3, 1e-2]}, trial_timeout=0.01)
    out = sweep(path, "--study-dir", str(study_dir), cwd=tmp_path)
    assert out.returncode == 2 and "(params changed)" in out.stderr, out.stderr


def test_pruning_hook_reports_and_stops_the_run(tmp_path):
    from libai.hooks import OptunaPruningHook
    from libai.runner import Runner
    from libai.testing import toy_config

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="toy", storage=storage, direction="maximize")
    trial = study.ask()
    hook = dict(type="OptunaPruningHook", storage=storage, study_name="toy",
                trial_number=trial.number, monitor="val/accuracy",
                pruner=dict(type="ThresholdPruner", lower=2.0))  # accuracy < 2: always pruned
    cfg = toy_config(work_dir=str(tmp_path / "work"), custom_hooks=[hook],
                     train_cfg=dict(max_iters=30, val_interval=10),
                     default_hooks=dict(logger=dict(plot=False)))
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.iter == 10 and runner.should_stop  # stopped at the first validation
    assert [h for h in runner.hooks if isinstance(h, OptunaPruningHook)][0].pruned
    marker = json.loads((tmp_path / "work" / "optuna_pruned.json").read_text())
    assert marker["step"] == 10 and 0 <= marker["value"] <= 1
    reported = study.trials[0].intermediate_values
    assert list(reported) == [10] and reported[10] == marker["value"]
    assert study.trials[0].state.name == "RUNNING"  # the sweep, not the hook, finishes it


def test_study_dir_that_is_a_file_is_one_line(run_tool, tmp_path):
    path = write_sweep(tmp_path / "f.py", params={LR: [1e-3]})
    (tmp_path / "taken").write_text("a file\n")
    for study_dir, what in ((tmp_path / "taken", "is a file"),
                            (tmp_path / "taken" / "study", "lies under a file")):
        out = run_tool(TOOL, path, "--study-dir", str(study_dir), cwd=tmp_path)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.strip().splitlines() == [
            f"error: --study-dir {study_dir} {what}"
            + (f" ({tmp_path / 'taken'})" if what != "is a file" else "")
            + ", not a folder: give the study a folder (one that does not exist yet is made)."]


def test_progress_follows_a_trials_scalars(tmp_path):
    """TrialWatch reads complete lines only, from the trial's run folder once it exists; off a
    terminal SweepProgress says a line per new metric value, with the trial's place."""
    from libai.tuning.sweep_progress import SweepProgress, TrialWatch

    watch = TrialWatch(str(tmp_path), "val/accuracy")
    assert not watch.read()  # the trial has not started training yet
    run = tmp_path / "20261126_080000"
    run.mkdir()
    scalars = run / "scalars.jsonl"
    scalars.write_text('{"step": 20, "train/loss": 1.5}\n{"step": 20, "val/accuracy": 0.5}\n'
                       '{"step": 40, "train/lo')  # a line being written
    assert watch.read() and (watch.step, watch.value) == (20, 0.5)
    assert not watch.read()  # nothing new
    with open(scalars, "a") as f:
        f.write('ss": 1.1}\n{"step": 40, "val/accuracy": 0.75}\n')
    assert watch.read() and (watch.step, watch.value) == (40, 0.75)

    lines = []
    progress = SweepProgress(todo=3, metric="val/accuracy", say=lines.append, bar=False)
    assert progress.started(7, str(tmp_path), total_steps=60) == 1
    progress.poll(force=True)
    assert lines == ["trial 7 (1/3): step 40/60, val/accuracy 0.75"]
    progress.poll(force=True)
    assert len(lines) == 1  # said once per new value
    assert progress.place(7) == " (1/3)"
    progress.finished(7)
    assert progress.done == 1 and progress.place(7) == ""
    progress.stop()


def test_a_trial_that_ends_between_two_polls_still_shows_its_last_value(tmp_path):
    """A short trial writes its metric and ends before the next poll (once a second): the line
    is said when it finishes, not lost."""
    from libai.tuning.sweep_progress import SweepProgress

    lines = []
    progress = SweepProgress(todo=1, metric="val/accuracy", say=lines.append, bar=False)
    progress.started(0, str(tmp_path), total_steps=60)
    progress.poll(force=True)  # not training yet
    (tmp_path / "20261128_080000").mkdir()
    (tmp_path / "20261128_080000" / "scalars.jsonl").write_text(
        '{"step": 60, "val/accuracy": 0.875}\n')
    progress.finished(0)
    assert lines == ["trial 0 (1/1): step 60/60, val/accuracy 0.875"]
    progress.stop()


def test_default_hooks_are_keys_without_plus_in_a_sweep(tmp_path):
    """A default hook the config does not list (throughput) takes no `+`, in the sweep file's
    cfg_options, in --cfg-options and as a swept parameter, as in tools/train.py (issue 27)."""
    import types

    from libai.tuning.sweep_file import Sweep

    path = write_sweep(tmp_path / "hooks.py", params={"default_hooks.throughput.summary": [False]},
                       cfg_options=[*FAST, "default_hooks.throughput.count_flops=False"])
    args = types.SimpleNamespace(parallel=None, trials=None, study_dir=str(tmp_path / "s"),
                                 cfg_options=["default_hooks.throughput.peak_tflops=1.0"])
    sweep_ = Sweep(path, args)
    assert sweep_.base_cfg.default_hooks.throughput.count_flops is False
    assert sweep_.base_cfg.default_hooks.throughput.peak_tflops == 1.0
    assert sweep_.cfg_options[-1] == "default_hooks.throughput.peak_tflops=1.0"
    with pytest.raises(Exception, match="throughputt"):
        Sweep(write_sweep(tmp_path / "typo.py", params={"default_hooks.throughputt.x": [1]}),
              args)


def test_trials_limits_a_grid_to_its_first_points(tmp_path):
    import types

    from libai.tuning.sweep_file import Sweep
    from libai.utils.errors import ConfigError

    path = write_sweep(tmp_path / "grid.py",
                       params={"optim_wrapper.optimizer.lr": [1e-3, 2e-3, 3e-3]})
    args = dict(parallel=None, study_dir=str(tmp_path / "s"), cfg_options=[])
    assert Sweep(path, types.SimpleNamespace(trials=None, **args)).trials == 3
    assert Sweep(path, types.SimpleNamespace(trials=2, **args)).trials == 2
    assert Sweep(path, types.SimpleNamespace(trials=9, **args)).trials == 3
    with pytest.raises(ConfigError, match="--trials must be an int >= 1, got 0"):
        Sweep(path, types.SimpleNamespace(trials=0, **args))
