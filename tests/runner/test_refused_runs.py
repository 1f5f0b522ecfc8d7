"""A refused run writes nothing (docs/reliability.md, "Bad input"): each kind of refusal the docs
list, through the tool a user runs (in-process, run_tool), leaves the work dir byte for byte as
it was, or absent when it was. Before issue 34 the refusals after the run folder was made (a
value a constructor rejects, a refused --resume, a damaged checkpoint, an empty test file) left
``work_dir/<timestamp>/`` with a log and config.py. CPU, digits, a second or two each."""

from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from libai.data.text import TextTokenizer
from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.errors import ConfigError

QUICK = "configs/digits_mlp.py"
SHORT = ("train_cfg.max_iters=3", "default_hooks.checkpoint.save_best=None",
         "+default_hooks.logger.plot=False")


def listing(folder) -> dict[str, str]:
    """Every file and folder under ``folder``: its path -> the sha256 of its bytes (or "dir")."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), folder)] = "dir"
        for f in files:
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A work dir after a 3-iteration digits run: iter_3.pth and its run folder."""
    from tool_runs import run_tool

    work = tmp_path_factory.mktemp("trained") / "w"
    run_tool("tools/train.py", QUICK, "--work-dir", work, "--cfg-options", *SHORT).check()
    return work


def _empty_test_file(tmp_path):
    """A config whose test set is an empty CSV (the train file is fine)."""
    tok = TextTokenizer.train(["to be or not to be", "what light through yonder window"] * 20,
                              "wordpiece", 60)
    tok.save(tmp_path / "tokenizer.json")
    (tmp_path / "train.csv").write_text("text,label\nto be,a\nor not,b\n")
    (tmp_path / "test.csv").write_text("")
    cfg = tmp_path / "empty_test.py"
    cfg.write_text(
        f"_base_ = {os.path.abspath(QUICK)!r}\n"
        f"test_dataloader = dict(dataset=dict(_delete_=True, type='LabeledTextDataset', "
        f"data_files=dict(train={str(tmp_path / 'train.csv')!r}, "
        f"test={str(tmp_path / 'test.csv')!r}), split='test', "
        f"tokenizer={str(tmp_path / 'tokenizer.json')!r}))\n")
    return ["tools/train.py", cfg]


# kind -> (the command, given the test's folder and the trained work dir (copied), what the
# one-line error says)
CASES = {
    # a value a constructor rejects, found when the train loop is built
    "cfg-options-loop": (lambda tmp, work: ["tools/train.py", QUICK, "--work-dir", tmp / "new",
                                            "--cfg-options", "train_cfg.max_iters=abc"],
                         "train_cfg.max_iters='abc'"),
    # a value the model's constructor rejects, found while the runner is built
    "cfg-options-model": (lambda tmp, work: ["tools/train.py", QUICK, "--work-dir", tmp / "new",
                                             "--cfg-options", "model.hidden=abc"],
                          "model.hidden='abc'"),
    # --resume with another schedule
    "resume-schedule": (lambda tmp, work: ["tools/train.py", QUICK, "--work-dir", work, "--resume",
                                           "--cfg-options", *SHORT, "train_cfg.max_iters=5"],
                        "Resuming would change the schedule"),
    # --resume where every checkpoint is damaged: "stops with one line and changes nothing"
    "resume-all-damaged": (lambda tmp, work: (_truncate(work / "iter_3.pth"),
                                              ["tools/train.py", QUICK, "--work-dir", work,
                                               "--resume", "--cfg-options", *SHORT])[1],
                           "are damaged or incomplete"),
    # tools/test.py on a truncated checkpoint
    "test-truncated-checkpoint": (lambda tmp, work: (_truncate(work / "iter_3.pth"),
                                                     ["tools/test.py", QUICK, work / "iter_3.pth",
                                                      "--work-dir", tmp / "new"])[1],
                                  "truncated"),
    # an empty test file: the test set is built before training
    "empty-test-file": (lambda tmp, work: [*_empty_test_file(tmp), "--work-dir", tmp / "new"],
                        "test.csv"),
}


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(1000)


@pytest.mark.parametrize("kind", list(CASES))
def test_a_refused_run_leaves_the_work_dir_as_it_was(run_tool, tmp_path, trained, kind):
    work = tmp_path / "trained"
    shutil.copytree(trained, work)
    make_args, message = CASES[kind]
    args = make_args(tmp_path, work)
    before = listing(tmp_path)

    out = run_tool(*args)

    assert out.returncode == 2, out.output[-2000:]
    assert out.stderr.startswith("error: ") and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert listing(tmp_path) == before  # no run folder, no work dir, nothing changed
    assert not (tmp_path / "new").exists()


def test_a_refusal_after_the_work_began_keeps_the_run_folder(tmp_path):
    """Only a refusal before a loop starts is taken back: a run that trained keeps its
    folder and log when a later call is refused (here: test() without a test set)."""
    quiet = dict(logger=dict(type="LoggerHook", plot=False))
    runner = Runner.from_cfg(toy_config(work_dir=str(tmp_path / "w"), train_cfg=dict(max_iters=2),
                                        default_hooks=quiet))
    runner.train()
    with pytest.raises(ConfigError, match="test\\(\\) needs 'test_dataloader'"):
        runner.test()
    assert os.path.isfile(os.path.join(runner.log_dir, f"{runner.timestamp}.log"))
