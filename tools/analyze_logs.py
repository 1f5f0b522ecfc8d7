"""Analyze the scalar logs (``scalars.jsonl``) of one or more runs: curves, iteration times, a summary.

    python tools/analyze_logs.py plot_curve RUN [RUN ...] [--keys train/loss val/accuracy]
        [--x step|epoch] [--smooth N] [--log-scale] [--legend NAME ...] [--title T] --out FILE
    python tools/analyze_logs.py cal_train_time RUN [RUN ...]
    python tools/analyze_logs.py summary RUN [RUN ...]

A RUN is a work dir (``work_dirs/digits_mlp``) or one ``scalars.jsonl`` file. In a work dir,
each run has a timestamped run folder, ``WORK_DIR/<YYYYmmdd_HHMMSS>/``: a fresh training writes its
training, validation and test scalars into its own folder's ``scalars.jsonl``, a resumed training
continues that file, and ``tools/test.py`` writes into its own folder. Given a work dir, the tool
reads the newest training (the newest fresh, not resumed, training run, found from the run
folders' logs) and the run folders after it, oldest first; older runs are left out with a note
(pass their ``scalars.jsonl`` to read one of them). Where two files give the same key at the same
step, the newer wins. Work dirs of older libai versions (``WORK_DIR/scalars.jsonl``) read too.

The same as ``libai analyze-logs ...``. From Python (run names default to the work dir's name)::

    from libai.analysis import cal_train_time, load_runs, plot_curve, summary
    runs = load_runs(["work_dirs/a", "work_dirs/b"])
    fig = plot_curve(runs, keys=["train/loss", "val/accuracy"], out="curves.png")
    times = cal_train_time(runs)        # {name: TrainTime}
    table = summary(runs)               # {name: RunSummary}

Bad input (a missing path, a folder without ``scalars.jsonl``, an unknown key) is one line,
``error: ...``, and exit status 2; ``--debug`` shows the traceback.
"""

from libai.analysis import (  # noqa: F401  (the Python API, importable from here as before)
    LogError,
    Run,
    RunSummary,
    TrainTime,
    better_rule,
    cal_train_time,
    load_runs,
    plot_curve,
    summary,
)
from libai.cli.analyze_logs import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
