"""Fine-tuning on one's own files, as the runner builds it (device: CPU, in-process): every
split's file is checked before the model is built, the classifier's class count comes from the
train labels, a limited validation samples every class and the log says when a set lacks one,
and an iteration loop can be sized in epochs. A tiny BERT on a few CSV rows: seconds."""

from __future__ import annotations

import logging

import pytest

import libai.runner.runner as runner_module
from libai import Runner
from libai.data.text import TextTokenizer
from libai.hooks import Hook
from libai.testing import toy_config
from libai.utils.errors import LibaiError

CLASSES = ("comedy", "history", "tragedy")
WORDS = {"comedy": "merry jest wooing song", "history": "king crown war england",
         "tragedy": "death blood grave woe"}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    lines = [f"{w} {v}" for v in WORDS.values() for w in "a the my thy".split()] * 3
    tok = TextTokenizer.train(lines, "wordpiece", 80)
    return str(tok.save(tmp_path_factory.mktemp("tok") / "tokenizer.json")), tok.vocab_size


def write_csv(path, labels):
    rows = [f"{WORDS.get(label, label)} number {i},{label}" for i, label in enumerate(labels)]
    path.write_text("text,label\n" + "\n".join(rows) + ("\n" if rows else ""))
    return str(path)


def config(tmp_path, tokenizer, val=None, test=None, num_classes=None, **overrides):
    """A classifier fine-tuned on CSV files; the val file is sorted by label (16 of each)."""
    path, vocab = tokenizer
    files = dict(train=write_csv(tmp_path / "train.csv", CLASSES * 6),
                 val=write_csv(tmp_path / "val.csv", val or [c for c in CLASSES for _ in range(16)]),
                 test=write_csv(tmp_path / "test.csv", CLASSES * 2 if test is None else test))
    data = dict(type="LabeledTextDataset", data_files=files, tokenizer=path, max_seq_length=16)

    def loader(split, shuffle):
        return dict(dataset=dict(data, split=split), collate_fn=dict(type="pad_collate"),
                    sampler=dict(type="DefaultSampler", shuffle=shuffle), batch_size=8,
                    num_workers=0)

    cfg = toy_config(
        work_dir=str(tmp_path / "work"),
        model=dict(type="BertForSequenceClassification", vocab_size=vocab, hidden_size=16,
                   num_layers=1, num_heads=1, ffn_hidden_size=32, max_position_embeddings=16,
                   num_classes=num_classes),
        train_dataloader=loader("train", True), val_dataloader=loader("val", False),
        test_dataloader=loader("test", False), val_evaluator=dict(type="Accuracy"),
        test_evaluator=dict(type="Accuracy"),
        default_hooks=dict(logger=dict(progress_bar=False, plot=False), checkpoint=None))
    cfg.update(overrides)
    return cfg


class _Labels(Hook):
    def __init__(self) -> None:
        self.seen: list[int] = []

    def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        self.seen += data_batch["labels"].tolist()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def log_lines():
    handler = _Lines()
    logging.getLogger("libai").addHandler(handler)
    yield handler.lines
    logging.getLogger("libai").removeHandler(handler)


def test_a_limited_validation_of_a_file_sorted_by_label_holds_every_class(
        tmp_path, tokenizer, log_lines):
    # the first 2 batches of 8 are all comedy: an untrained model scored 1.0 on them
    cfg = config(tmp_path, tokenizer, num_classes=3, val_cfg=dict(limit_batches=2))
    runner = Runner.from_cfg(cfg)
    labels = _Labels()
    runner.register_hook(labels)
    metrics = runner.val()
    assert sorted(labels.seen) == [0] * 6 + [1] * 5 + [2] * 5, labels.seen
    assert 0 < metrics["val/accuracy"] < 1  # an untrained model's, on 3 classes
    assert "val: 2 of 6 batches (limit_batches=2), 16 samples by class" in log_lines, log_lines
    runner.val()  # the same samples at every evaluation
    assert labels.seen[:16] == labels.seen[16:]


def test_the_sample_takes_every_class_first_then_their_shares():
    from libai.loops.eval_sample import sample_by_class

    cats = [[0]] * 90 + [[1]] * 9 + [[2]]  # 90%, 9%, 1%, sorted
    assert [cats[i][0] for i in sample_by_class(cats, 3)] == [0, 1, 2]
    picked = [cats[i][0] for i in sample_by_class(cats, 20)]
    assert picked.count(0) >= 16 and picked.count(2) == 1
    assert sample_by_class(cats, 200) == list(range(100))


def test_the_log_says_which_classes_a_validation_set_lacks(tmp_path, tokenizer, log_lines):
    cfg = config(tmp_path, tokenizer, val=["comedy", "history"] * 4, num_classes=3)
    Runner.from_cfg(cfg).val()
    assert any("val: its samples hold 2 of 3 classes (none of tragedy)" in line
               for line in log_lines), log_lines


def test_num_classes_comes_from_the_train_labels(tmp_path, tokenizer, log_lines):
    runner = Runner.from_cfg(config(tmp_path, tokenizer))
    assert runner.unwrapped_model.config["num_classes"] == 3
    assert runner.cfg.model.num_classes is None  # derived and logged, not written back
    assert "model.num_classes=3: the labels of train_dataloader.dataset" in log_lines


@pytest.fixture
def no_model(monkeypatch):
    """Fails the test if the runner gets as far as building the model."""
    def build_model(*args, **kwargs):
        raise AssertionError("the model was built before the data files were checked")

    monkeypatch.setattr(runner_module, "build_model", build_model)


@pytest.mark.parametrize("case, message", [
    (dict(num_classes=2), "model.num_classes=2 but train_dataloader.dataset has 3 labels "
                          "(comedy, history, tragedy): set model.num_classes=3"),
    (dict(val=["comedy", "farce"]), "val.csv line 3: label 'farce' is not one of the training "
                                    "labels"),
    (dict(test=[]), "Building 'test_dataloader.dataset' (LabeledTextDataset) failed: DataError: "),
])
def test_bad_files_and_a_wrong_class_count_stop_the_run_before_the_model(
        tmp_path, tokenizer, no_model, case, message):
    with pytest.raises(LibaiError, match=None) as error:
        Runner.from_cfg(config(tmp_path, tokenizer, **case))
    assert message in str(error.value), str(error.value)
    if "test" in case:
        assert "test.csv holds no records" in str(error.value)
    assert not (tmp_path / "work").exists()  # nothing written either


def test_a_dry_run_builds_the_test_set_too(run_tool, tmp_path):
    out = run_tool("tools/train.py", "configs/digits_mlp.py", "--fast-dev-run", "--cfg-options",
                   "test_dataloader.dataset.split=tset")
    assert out.returncode == 2, out.output[-2000:]
    assert "Building 'test_dataloader.dataset' (DigitsDataset) failed" in out.stderr


@pytest.mark.parametrize("max_iters, iters", [(None, 16), (5, 5), (100, 16)])
def test_an_iteration_loop_sized_in_epochs_stops_at_whichever_comes_first(
        tmp_path, max_iters, iters):
    cfg = toy_config(work_dir=str(tmp_path), train_cfg=dict(max_epochs=2, max_iters=max_iters))
    runner = Runner.from_cfg(cfg)  # 64 samples in batches of 8: 8 iterations per epoch
    assert runner.max_iters == iters and runner.max_epochs is None  # the loop counts iterations


def _rank(cfg: dict) -> dict:
    """One of two ranks (spawn_ranks gives it torchrun's environment): a limited validation."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        runner = Runner.from_cfg(cfg)
        labels = _Labels()
        runner.register_hook(labels)
        return dict(metrics=runner.val(), labels=labels.seen,
                    samples=runner.message_hub.get_info("eval_samples"))
    finally:
        dist.destroy_process_group()


def test_two_ranks_evaluate_the_same_by_class_sample_as_one_process(
        tmp_path, tokenizer, spawn_ranks):
    # 2 batches of 8 per rank: 32 samples by class, split over the ranks, each once
    cfg = config(tmp_path, tokenizer, num_classes=3, val_cfg=dict(limit_batches=2))
    runs = spawn_ranks(2, _rank, cfg, timeout=300).check()
    ranks = [run.value for run in runs.ranks]
    assert ranks[0]["metrics"] == ranks[1]["metrics"] and ranks[0]["samples"] == 32
    assert sorted(ranks[0]["labels"] + ranks[1]["labels"]) == [0] * 11 + [1] * 11 + [2] * 10
    one = config(tmp_path, tokenizer, num_classes=3, work_dir=str(tmp_path / "one"),
                 val_cfg=dict(limit_batches=4))  # the same 32 samples in one process
    assert Runner.from_cfg(one).val() == pytest.approx(ranks[0]["metrics"], rel=1e-6)
