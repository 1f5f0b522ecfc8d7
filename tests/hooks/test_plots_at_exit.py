"""The plots of a run are final when the run's process exits: it waits for its plot process
(libai/visualization/plots.py, finish_plots at exit), stops one that takes too long with a line
saying so, and a plot process whose run is gone writes nothing more. CPU only."""

import os
import subprocess
import time
from types import SimpleNamespace

import pytest

from libai.visualization import plots


def _snapshot(folder):
    """Every file under ``folder``: its size and modification time."""
    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            st = os.stat(os.path.join(root, name))
            out[os.path.relpath(os.path.join(root, name), folder)] = (st.st_size, st.st_mtime_ns)
    return out


def test_nothing_in_the_work_dir_changes_after_the_run_exits(tmp_path, run_process):
    """tools/train.py with the default plots (a background process): once the command has
    exited, the plots and their "Saved ..." line are there, and nothing changes afterwards."""
    pytest.importorskip("matplotlib")
    work = tmp_path / "w"
    out = run_process("tools/train.py", "configs/digits_mlp.py", "--work-dir", work,
                      "--cfg-options", "train_cfg.max_iters=6", "train_cfg.val_interval=3",
                      "default_hooks.logger.interval=2", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    at_exit = _snapshot(work)
    logs = [p for p in at_exit if p.endswith(".log")]
    assert len(logs) == 1
    assert "Saved overview.png and" in (work / logs[0]).read_text()
    assert any(p.endswith(os.path.join("plots", "overview.png")) for p in at_exit)
    assert not any(".tmp-" in p for p in at_exit)
    time.sleep(1.5)  # the old detached process wrote its PNGs and log line about now
    assert _snapshot(work) == at_exit


class _SlowPlotProcess:
    """Stands in for a plot process that is still drawing (no real process: fast tier)."""

    def __init__(self, tmp_path):
        self.args = ["python", "plots.py", str(tmp_path / "scalars.jsonl"), str(tmp_path / "plots")]
        self.signals = []

    def wait(self, timeout=None):
        if not self.signals:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return -15

    def poll(self):
        return None if not self.signals else -15

    def terminate(self):
        self.signals.append("SIGTERM")

    def kill(self):
        self.signals.append("SIGKILL")


def test_plots_unfinished_at_exit_are_stopped_with_a_line(tmp_path, monkeypatch, capsys):
    log = tmp_path / "run.log"
    log.write_text("")
    proc = _SlowPlotProcess(tmp_path)
    monkeypatch.setattr(plots, "_STARTED", [(proc, str(log))])
    plots.finish_plots(timeout=0.01)
    assert proc.signals == ["SIGTERM"]
    line = ("LoggerHook: stopped drawing the plots (not finished 0.01 s after the run ended), so "
            "that nothing is written after the run. Draw them with: python plots.py "
            f"{tmp_path / 'scalars.jsonl'} {tmp_path / 'plots'}")
    assert line in capsys.readouterr().err
    assert f"libai - WARNING - {line}" in log.read_text()
    assert plots._STARTED == []


def test_a_plot_process_whose_run_is_gone_writes_nothing(tmp_path, monkeypatch):
    """The run was killed (its process is not this one's parent any more): the PNG being saved
    is neither renamed into place nor left as a temporary file."""
    monkeypatch.setattr(plots, "_PARENT", os.getppid() + 1)
    target = tmp_path / "loss.png"
    fig = SimpleNamespace(savefig=lambda path, dpi: open(path, "wb").write(b"png"))
    with pytest.raises(SystemExit):
        plots._save(fig, str(target))
    assert os.listdir(tmp_path) == []
