"""Experiment trackers (WandbBackend, MLflowBackend) and HistogramHook, read back with each
library's own reader: MLflow's client, wandb's ``wandb leet inspect`` (its reader of ``.wandb``
run files) and TensorBoard's EventAccumulator."""

import glob
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from libai.hooks import LoggerHook
from libai.hooks.histogram_hook import HistogramHook
from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.errors import ConfigError
from libai.visualization.backends import Histogram, TensorboardBackend, flatten_config
from libai.visualization.mlflow_backend import MLflowBackend
from libai.visualization.wandb_backend import WandbBackend


def _tracker_env(mp, tmp):
    """wandb offline and silent, writing nothing outside ``tmp``; MLflow's default store."""
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        mp.setenv(var, str(tmp / "wandb_home"))
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_SILENT", "true")
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)
    mp.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # the backend sets it; undone after


@pytest.fixture
def tracker_env(monkeypatch, tmp_path):
    _tracker_env(monkeypatch, tmp_path)


def _wandb_inspect(run_process, run_dir, *flags):
    """``wandb leet inspect --json``: wandb's own reader of a run's ``.wandb`` file (a process:
    the reader is wandb's command)."""
    out = run_process("-m", "wandb", "leet", "inspect", "--json", *flags, run_dir, timeout=120,
                      env={"WANDB_MODE": "offline"})
    assert out.returncode == 0, out.stderr
    return out.stdout


def _history(run_process, run_dir):
    rows = {}
    for line in _wandb_inspect(run_process, run_dir).splitlines():
        record = json.loads(line)
        if record.get("type") == "history":
            rows[record["history"]["step"]["num"]] = record["history"]["item"]
    return rows


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory):
    """One runner writing to every backend at once (wandb's start-up is the slow part): 20
    training iterations, logged every 5, validated at 10 and 20, histograms at 10 and 20; then a
    test, like tools/train.py, which goes on in the same tracker runs."""
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    tmp = tmp_path_factory.mktemp("trackers")
    with pytest.MonkeyPatch.context() as mp:
        _tracker_env(mp, tmp)
        backends = [dict(type="JsonlBackend", flush_secs=0), dict(type="TensorboardBackend"),
                    dict(type="WandbBackend", mode="offline"), dict(type="MLflowBackend")]
        cfg = toy_config(
            work_dir=str(tmp / "work"),
            experiment_name="toy_trackers",
            default_hooks=dict(
                logger=dict(interval=5, progress_bar=False, plot=False, backends=backends),
                checkpoint=dict(save_best="val/accuracy"),
            ),
            custom_hooks=[dict(type="HistogramHook", interval=10)],
            test_dataloader=toy_config()["val_dataloader"],
            test_evaluator=dict(type="Accuracy"),
            test_cfg=dict(type="TestLoop"),
        )
        runner = Runner.from_cfg(cfg)
        runner.train()
        runner.test()
        with open(os.path.join(runner.series_dir, "scalars.jsonl")) as f:  # training, then test
            rows = [json.loads(line) for line in f]
        yield runner, rows


def _series(rows, key):
    return [(r["step"], r[key]) for r in rows if key in r]


def test_mlflow_holds_the_scalars_config_and_best_checkpoint(tracked_run):
    from mlflow.tracking import MlflowClient

    runner, rows = tracked_run
    client = MlflowClient(Path(runner.series_dir, "mlruns").as_uri())
    exp = client.get_experiment_by_name("toy_trackers")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == runner.timestamp and run.info.status == "FINISHED"
    keys = {k for r in rows for k in r if k != "step"}
    assert {"train/loss", "train/lr", "val/accuracy", "val/loss", "test/accuracy"} <= keys
    for key in keys:
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted((m.step, m.value) for m in history) == _series(rows, key), key
    params = run.data.params
    assert params["model.type"] == "ToyModel"
    assert params["optim_wrapper.optimizer.lr"] == "0.1"
    assert params["train_cfg.max_iters"] == "20"
    assert params["default_hooks.logger.backends.3.type"] == "MLflowBackend"
    hook = next(h for h in runner.hooks if type(h).__name__ == "CheckpointHook")
    best = os.path.join(runner.work_dir, hook.best_file)
    tags = run.data.tags
    assert tags["best_checkpoint"] == best and os.path.exists(best)
    assert tags["best_metric"] == "val/accuracy"
    assert float(tags["best_score"]) == hook.best_score
    assert float(tags["final/train/loss"]) == _series(rows, "train/loss")[-1][1]
    assert float(tags["final/val/accuracy"]) == _series(rows, "val/accuracy")[-1][1]
    assert float(tags["final/test/accuracy"]) == _series(rows, "test/accuracy")[-1][1]
    assert os.listdir(os.path.join(runner.series_dir, "mlruns"))  # the test in the same store
    with open(os.path.join(runner.series_dir, "mlflow_run.json")) as f:
        assert json.load(f)["run_id"] == run.info.run_id


def test_wandb_offline_run_file_holds_history_config_and_summary(tracked_run, run_process):
    runner, rows = tracked_run
    # training, then the test: two offline folders of the same W&B run (wandb sync joins them)
    train_dir, test_dir = sorted(glob.glob(os.path.join(runner.series_dir, "wandb", "offline-run-*")))
    with open(os.path.join(runner.series_dir, "wandb_run.json")) as f:
        run_id = json.load(f)["id"]
    assert f"-{run_id}" in os.path.basename(train_dir) and f"-{run_id}" in test_dir
    history = _history(run_process, train_dir)
    train_rows, test_rows = rows[:-1], rows[-1:]
    assert sorted(history) == sorted({r["step"] for r in train_rows})
    for row in train_rows:
        for key, value in row.items():
            if key != "step":
                assert history[row["step"]][key] == pytest.approx(value, rel=1e-12), key
    # the histograms ride in the rows of steps 10 and 20
    numel = {n: p.numel() for n, p in runner.unwrapped_model.named_parameters()}
    for step in (10, 20):
        for name, n in numel.items():
            for what in ("weights", "grads"):
                item = history[step]
                assert item[f"{what}/{name}._type"] == "histogram"
                assert sum(item[f"{what}/{name}.values"]) == n
                assert len(item[f"{what}/{name}.bins"]) == 65
    assert _history(run_process, test_dir)[20]["test/accuracy"] == test_rows[0]["test/accuracy"]
    summary = json.loads(_wandb_inspect(run_process, test_dir, "--summary"))
    assert summary["state"] == "finished" and summary["name"] == runner.timestamp
    assert summary["project"] == "toy_trackers"
    assert summary["config"]["model.type"] == "ToyModel"
    assert summary["config"]["optim_wrapper.optimizer.lr"] == 0.1
    hook = next(h for h in runner.hooks if type(h).__name__ == "CheckpointHook")
    assert summary["summary"]["best_checkpoint"] == os.path.join(runner.work_dir, hook.best_file)
    assert summary["summary"]["best_metric"] == "val/accuracy"
    assert summary["summary"]["train/loss"] == pytest.approx(_series(rows, "train/loss")[-1][1])
    assert summary["summary"]["test/accuracy"] == test_rows[0]["test/accuracy"]


def test_tensorboard_histograms_of_weights_and_grads(tracked_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    runner, _ = tracked_run
    acc = EventAccumulator(os.path.join(runner.series_dir, "tensorboard"),
                           size_guidance={"histograms": 0})
    acc.Reload()
    for name, p in runner.unwrapped_model.named_parameters():
        weights = acc.Histograms(f"weights/{name}")
        grads = acc.Histograms(f"grads/{name}")
        assert [e.step for e in weights] == [10, 20] and [e.step for e in grads] == [10, 20]
        last = weights[-1].histogram_value  # after the step of iteration 20: the final weights
        assert last.num == p.numel() and sum(last.bucket) == p.numel()
        assert last.min == p.min().item() and last.max == p.max().item()
        assert last.sum == pytest.approx(p.sum().item(), rel=1e-5, abs=1e-6)
        assert len(last.bucket) == len(last.bucket_limit) == 64
    assert acc.Scalars("train/loss")  # the scalars are still there, in the same file


def test_mlflow_resume_reuses_the_run_and_keeps_param_limits(tmp_path, tracker_env):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    config = {"model": {"type": "Net"}, "long": "x" * 7000, "_helper": 1,
              "many": {f"k{i}": i for i in range(150)}, "hooks": [{"type": "A"}, {"type": "B"}]}
    first = MLflowBackend(flush_secs=0)
    first.open(str(tmp_path), resume_step=0)
    first.log_config(config, experiment_name="exp", run_name="r1")
    first.add_scalars({"train/loss": 1.0}, 5)
    first.add_scalars({"train/loss": 0.5, "odd name[0]": 2.0}, 10)
    first.close()
    again = MLflowBackend()
    again.open(str(tmp_path), resume_step=5)
    again.log_config({**config, "model": {"type": "Net2"}, "added": 3}, experiment_name="exp",
                     run_name="r2")
    again.add_scalars({"train/loss": 0.7}, 10)
    again.log_summary({"train/loss": 0.7},
                      {"checkpoint": "/x/best.pth", "metric": "val/acc", "score": 0.9})
    again.close()

    client = MlflowClient((tmp_path / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert run.info.run_id == first.run_id == again.run_id and run.info.status == "FINISHED"
    params = run.data.params
    assert params["model.type"] == "Net" and params["added"] == "3"  # the first value stays
    assert len(params["long"]) == 6000 and "_helper" not in params
    assert {f"many.k{i}" for i in range(150)} <= set(params)
    assert params["hooks.1.type"] == "B"
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert sorted((m.step, m.value) for m in history) == [(5, 1.0), (10, 0.5), (10, 0.7)]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "odd name_0_")] == [2.0]
    assert run.data.tags["best_checkpoint"] == "/x/best.pth"
    assert run.data.tags["final/train/loss"] == "0.7"

    fresh = MLflowBackend()  # a fresh run (resume_step 0) starts a new MLflow run ...
    fresh.open(str(tmp_path), resume_step=0)
    fresh.log_config({}, experiment_name="exp")
    try:
        raise RuntimeError("boom")
    except RuntimeError:  # ... which ends FAILED when closed by an exception
        fresh.close()
    assert client.get_run(fresh.run_id).info.status == "FAILED"
    assert len(client.search_runs([run.info.experiment_id])) == 2


def test_wandb_resume_uses_the_same_run_id(tmp_path, tracker_env, monkeypatch, run_process):
    # slow by run_process: wandb starts processes of its own (git, its service), and the run
    # files are read back with wandb's command
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE")  # no mode anywhere: offline
    ids = []
    for resume_step in (0, 5):
        backend = WandbBackend()
        backend.open(str(tmp_path), resume_step=resume_step)
        backend.log_config({"a": {"b": 1}}, experiment_name="exp", run_name=f"r{resume_step}")
        backend.add_scalars({"train/loss": 1.0 / (resume_step + 1)}, resume_step + 5)
        ids.append(backend.run.id)
        assert backend.run.settings.mode == "offline"
        backend.close()
    assert ids[0] == ids[1]
    # one folder per attempt, both with the run's id (wandb adds '-1' within the same second)
    dirs = sorted(glob.glob(str(tmp_path / "wandb" / "offline-run-*")))
    assert len(dirs) == 2 and all(f"-{ids[0]}" in os.path.basename(d) for d in dirs)
    assert _history(run_process, dirs[1])[10]["train/loss"] == pytest.approx(1 / 6)


@pytest.mark.parametrize("backend,module", [("WandbBackend", "wandb"), ("MLflowBackend", "mlflow")])
def test_missing_tracker_package_gives_one_line(tmp_path, monkeypatch, backend, module):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    logger = dict(progress_bar=False, plot=False, backends=[dict(type=backend)])
    runner = Runner.from_cfg(toy_config(work_dir=str(tmp_path), default_hooks=dict(logger=logger)))
    with pytest.raises(ConfigError) as exc:
        runner.train()
    assert str(exc.value) == f"LoggerHook backend {backend} needs {module}: pip install {module}"
    assert runner.iter == 0


def test_histogram_hook_with_tensorboard(make_runner, run_iters, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = LoggerHook(interval=2, progress_bar=False, plot=False,
                        backends=[TensorboardBackend(flush_secs=0)])
    hist = HistogramHook(interval=2, names="weight")
    runner = make_runner(logger, hist, max_iters=4)
    runner.call_hook("before_run")
    run_iters(runner, step=True)
    runner.call_hook("after_run")
    acc = EventAccumulator(os.path.join(runner.series_dir, "tensorboard"),
                           size_guidance={"histograms": 0})
    acc.Reload()
    assert sorted(acc.Tags()["histograms"]) == ["grads/weight", "weights/weight"]
    grads = acc.Histograms("grads/weight")  # d(sum(W x + b))/dW with x = ones: all ones
    assert [e.step for e in grads] == [2, 4]
    g = grads[-1].histogram_value
    assert (g.min, g.max, g.num, g.sum, g.sum_squares) == (1.0, 1.0, 2.0, 2.0, 2.0)
    w = acc.Histograms("weights/weight")[-1].histogram_value
    weight = runner.unwrapped_model.weight
    assert (w.min, w.max) == (weight.min().item(), weight.max().item())


def test_histogram_hook_without_a_histogram_backend_turns_itself_off(make_runner, run_iters):
    logger = LoggerHook(progress_bar=False, plot=False, backends=[dict(type="JsonlBackend")])
    hist = HistogramHook(interval=1)
    runner = make_runner(logger, hist, max_iters=2)
    runner.call_hook("before_run")
    run_iters(runner, step=True)
    runner.call_hook("after_run")
    assert any("HistogramHook: no LoggerHook backend draws histograms" in m
               for m in runner.messages)
    assert not hist.uses_stage("after_backward") and not hist.uses_stage("after_train_iter")


@pytest.mark.parametrize("kwargs", [dict(interval=0), dict(what=("bias",)), dict(what=()),
                                    dict(bins=True), dict(names="(")])
def test_histogram_hook_rejects_bad_options(kwargs):
    with pytest.raises(ConfigError, match="HistogramHook"):
        HistogramHook(**kwargs)


def test_histogram_matches_numpy():
    values = torch.randn(1000, dtype=torch.float64)
    values[3] = float("nan")
    hist = Histogram.of(values, bins=20)
    finite = values[torch.isfinite(values)].numpy()
    counts, edges = np.histogram(finite, bins=20)
    assert hist.counts == counts.tolist() and np.allclose(hist.edges, edges)
    assert hist.num == 999 and hist.min == finite.min() and hist.max == finite.max()
    assert hist.sum == pytest.approx(finite.sum()) and hist.sum_squares == pytest.approx(
        (finite**2).sum())
    const = Histogram.of([2.0, 2.0], bins=4)
    assert const.edges[0] == 1.5 and const.edges[-1] == 2.5 and sum(const.counts) == 2
    assert Histogram.of(torch.tensor([float("inf")])) is None


def test_flatten_config():
    flat = flatten_config({"model": {"type": "Net", "dims": (1, 2)}, "_tmp": 1, "empty": {},
                           "hooks": [{"type": "EMAHook"}], "dtype": torch.float16})
    assert flat == {"model.type": "Net", "model.dims": [1, 2], "empty": {},
                    "hooks.0.type": "EMAHook", "dtype": "torch.float16"}


def test_wandb_mode_is_checked():
    with pytest.raises(ConfigError, match="mode must be"):
        WandbBackend(mode="offlne")
