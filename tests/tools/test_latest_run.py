"""Several runs in one work dir: `--resume` and `analyze_logs` follow the latest run, not the one
that went furthest; a refused `--resume` attempt leaves nothing, and a run folder that logged no
step (a run killed while it was being built) hides nothing."""

import pytest

from libai.checkpoint import find_resumable, load_checkpoint
from libai.cli.analyze_logs import main as analyze_logs
from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.errors import ConfigError
from libai.utils.run_layout import run_folders


def config(work, max_iters, **extra):
    return toy_config(work_dir=str(work), train_cfg=dict(max_iters=max_iters, val_interval=100),
                      default_hooks=dict(checkpoint=dict(type="CheckpointHook", interval=10),
                                         logger=dict(type="LoggerHook", interval=5,
                                                     plot=False)), **extra)


def train(cfg):
    runner = Runner.from_cfg(cfg)
    try:
        runner.train()
    finally:
        runner.close()
    return runner


def test_resume_and_analyze_logs_follow_the_latest_run(tmp_path, capsys):
    work = tmp_path / "w"
    train(config(work, 30))  # the run that went furthest: iter_10, 20, 30
    train(config(work, 10))  # the latest run: its own iter_10
    latest = find_resumable(work)
    assert latest == work / "iter_10.pth"
    assert load_checkpoint(latest)["meta"]["run_folder"] == run_folders(str(work))[1].split("/")[-1]

    # refused: resuming with another schedule; nothing written (docs/reliability.md)
    with pytest.raises(ConfigError, match="Resuming would change the schedule"):
        train(config(work, 40, resume=True))
    assert len(run_folders(str(work))) == 2
    # a run killed while it was being built: its folder holds a log and no step
    started = work / "29990101_000000"
    started.mkdir()
    (started / "29990101_000000.log").write_text(
        "INFO Derived: iterations per epoch 8, max iterations 40\n")

    capsys.readouterr()
    assert analyze_logs(["summary", str(work)]) == 0
    out = capsys.readouterr()
    iterations = [line for line in out.out.splitlines() if line.strip("│ ").startswith("iterations")]
    assert iterations and iterations[0].split("│")[-2].strip() == "10", out.out
    assert "left out 1 run folder(s) older than the current training" in out.err

    resumed = train(config(work, 10, resume=True))  # the latest run, which had finished
    assert resumed.iter == 10
