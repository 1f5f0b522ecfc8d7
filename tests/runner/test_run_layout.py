"""The work dir a user gets is the one the docs describe: the commands of docs/getting_started.md
("The work dir") are run here as written, and their files are compared with its listing. Then a
``--fast-dev-run`` in that work dir must leave every byte of it as it was."""

import fnmatch
import json
import os
import re
import shlex

import pytest

from libai.utils.run_layout import RUN_FOLDER, run_folders, wait_for_plots

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "getting_started.md")
DOC_WORK = "work_dirs/layout"


def _doc_blocks():
    text = open(DOC, encoding="utf-8").read()
    i = text.index("### The work dir")
    commands = re.search(r"```bash\n(.*?)```", text[i:], re.S).group(1)
    listing = re.search(r"```text\n(.*?)```", text[i:], re.S).group(1)
    return [shlex.split(c) for c in commands.strip().splitlines()], listing


def _doc_paths(listing):
    """The listing's lines as paths relative to the work dir (folders end with '/')."""
    lines = listing.rstrip().splitlines()
    assert lines[0] == f"{DOC_WORK}/", lines[0]
    stack, paths = [], []
    for line in lines[1:]:
        depth = (len(line) - len(line.lstrip(" "))) // 2 - 1
        name = line.split()[0]
        stack = stack[:depth] + [name]
        paths.append("".join(p if p.endswith("/") else p + "/" for p in stack[:-1]) + name)
    return paths


def _real_paths(work, rename):
    out = []
    for root, dirs, files in os.walk(work):
        rel = os.path.relpath(root, work)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        out += [prefix + d + "/" for d in dirs] + [prefix + f for f in files]
    # whole names only: "20240101_120000" must not rename the start of "20240101_120000_2"
    names = {**rename, **{real + ".log": doc + ".log" for real, doc in rename.items()}}
    return sorted("/".join(names.get(part, part) for part in p.split("/")) for p in out)


def _matches(path, pattern):
    a, b = path.rstrip("/").split("/"), pattern.rstrip("/").split("/")
    return (len(a) == len(b) and path.endswith("/") == pattern.endswith("/")
            and all(fnmatch.fnmatchcase(x, y) for x, y in zip(a, b)))


def _snapshot(work):
    out = {}
    for root, _, files in os.walk(work):
        for f in files:
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, work)] = fh.read()
    return out


@pytest.mark.usefixtures("run_process")  # slow: each run draws its plots in a process of its own
def test_layout_after_two_runs_and_a_resume_is_the_documented_one(tmp_path, run_tool):
    work = str(tmp_path / "layout")
    commands, listing = _doc_blocks()
    assert len(commands) == 3
    for argv in commands:
        assert argv[:2] == ["python", "tools/train.py"], argv
        run_tool(argv[1], *[a.replace(DOC_WORK, work) for a in argv[2:]]).check()
    wait_for_plots(work)

    doc_paths = _doc_paths(listing)
    doc_runs = [p[:-1] for p in doc_paths if p.endswith("/") and RUN_FOLDER.match(p[:-1])]
    real_runs = [os.path.basename(f) for f in run_folders(work)]
    assert len(real_runs) == len(doc_runs) == 3
    real = _real_paths(work, dict(zip(real_runs, doc_runs)))
    unlisted = [p for p in real if not any(_matches(p, d) for d in doc_paths)]
    missing = [d for d in doc_paths if not any(_matches(p, d) for p in real)]
    assert not unlisted and not missing, (unlisted, missing)
    assert open(os.path.join(work, "latest_checkpoint")).read().strip() == "iter_20.pth"

    # each series once per step: run 2's series holds run 2's 5, 10, then run 3's 15, 20
    first, second, third = (os.path.join(work, r) for r in real_runs)
    rows = [json.loads(line) for line in open(os.path.join(second, "scalars.jsonl"))]
    assert [r["step"] for r in rows if "train/loss" in r] == [5, 10, 15, 20]
    log3 = open(os.path.join(third, os.path.basename(third) + ".log")).read()
    assert f"Scalars continue the series in {second}." in log3
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for series in (first, second):
        events = EventAccumulator(os.path.join(series, "tensorboard"))
        events.Reload()
        assert [e.step for e in events.Scalars("train/loss")] == [5, 10, 15, 20], series

    # a dry run in this work dir writes nothing into it, and changes no byte
    before = _snapshot(work)
    run_tool("tools/train.py", "configs/digits_mlp.py", "--work-dir", work, "--fast-dev-run").check()
    after = _snapshot(work)
    assert [k for k in after.keys() | before.keys() if after.get(k) != before.get(k)] == []


def test_fast_dev_run_leaves_every_byte_of_the_work_dir(tmp_path):
    from libai.runner import Runner
    from libai.testing import toy_config

    def cfg(**kw):
        return toy_config(work_dir=str(tmp_path), train_cfg=dict(max_iters=4, val_interval=2),
                          default_hooks=dict(logger=dict(interval=1, plot=False),
                                             checkpoint=dict(interval=2)), **kw)

    Runner.from_cfg(cfg()).train()
    before = _snapshot(str(tmp_path))
    assert any(p.endswith("scalars.jsonl") for p in before) and "latest_checkpoint" in before
    dry = Runner.from_cfg(cfg(resume=True), fast_dev_run=2)
    dry.train()
    dry.val()
    assert _snapshot(str(tmp_path)) == before
    assert not dry.log_dir.startswith(str(tmp_path))
