"""Fine-tuning as a user runs it: configs/bert_tiny_genre.py through tools/train.py from a
pretraining checkpoint, then tools/test.py, tools/predict.py and libai2hf into transformers.

tools/predict.py runs as a process of its own (its one real process in the suite); the other
tools run in this process (run_tool: the same main(argv); their processes: tests/tools/test_tools.py
and test_convert_checkpoint.py)."""

import json
import os
import re

import pytest
import torch

from libai.checkpoint import load_checkpoint, model_state_for_saving, save_checkpoint
from libai.config import Config
from libai.registry import MODELS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENRE = os.path.join(ROOT, "configs", "bert_tiny_genre.py")
CLASSES = ["comedy", "history", "tragedy"]
SHORT = ["train_cfg.max_iters=6", "train_cfg.val_interval=3", "val_cfg.limit_batches=2",
         "test_cfg.limit_batches=2", "default_hooks.checkpoint.interval=3",
         "default_hooks.logger.interval=3", "+default_hooks.logger.plot=False"]


@pytest.fixture
def train(run_tool, shipped_config):
    """``train(*args)``: tools/train.py configs/bert_tiny_genre.py in this process. It builds a
    runner from a shipped config (shipped_config: the test is slow)."""
    return lambda *args: run_tool("tools/train.py", GENRE, *args)


def pretraining_checkpoint(path):
    """A BertForPreTraining with bert_tiny's dimensions, saved as tools/train.py saves one."""
    cfg = Config.fromfile(os.path.join(ROOT, "configs", "bert_tiny.py"))
    torch.manual_seed(1)
    model = MODELS.build(cfg.model.to_dict())
    save_checkpoint({"state_dict": model_state_for_saving(model), "meta": {}}, str(path))
    return model.state_dict()


def test_genre_fine_tunes_from_a_pretraining_checkpoint_then_tests_predicts_exports(
        train, run_tool, run_process, shipped_config, tmp_path):
    pre = pretraining_checkpoint(tmp_path / "pre.pth")
    work = tmp_path / "work"
    out = train("--work-dir", work, "--cfg-options", f"load_from.path={tmp_path / 'pre.pth'}",
                *SHORT).check()
    log = out.output
    # the load report names what the classifier adds and what pretraining leaves behind
    assert "classifier.* (2 keys)" in log and "mlm_head" in log, log[-3000:]
    assert "val: 2 of" in log and "test/accuracy" in log and "val/f1/tragedy" in log
    best = [f for f in os.listdir(work) if f.startswith("best_val_f1_") and f.endswith(".pth")]
    assert len(best) == 1, os.listdir(work)
    ckpt = load_checkpoint(str(work / best[0]))
    assert ckpt["meta"]["dataset_meta"]["classes"] == CLASSES
    # it started from the pretraining weights: 6 small steps move them by little
    emb = "bert.embeddings.word_embeddings.weight"
    assert torch.allclose(ckpt["state_dict"][emb], pre[emb], atol=5e-3)
    assert not torch.equal(ckpt["state_dict"][emb], pre[emb])

    test = run_tool("tools/test.py", GENRE, work / best[0], "--work-dir", tmp_path / "test",
                    "--cfg-options", "test_cfg.limit_batches=2").check()
    assert "test/accuracy" in test.output

    passage = "KING HENRY: Once more unto the breach, dear friends, once more"
    pred = run_process("tools/predict.py", GENRE, work / best[0], passage, "--top-k", "3",
                       "--out", tmp_path / "p.jsonl").check()
    line = pred.stdout.splitlines()[0]
    assert sorted(re.findall(r"(comedy|history|tragedy) \d\.\d\d", line)) == CLASSES, line
    record = json.loads((tmp_path / "p.jsonl").read_text())
    assert record["label"] in CLASSES and abs(sum(p for _, p in record["top"]) - 1) < 1e-3

    hf = tmp_path / "hf"
    run_tool("tools/convert_checkpoint.py", "libai2hf", GENRE, work / best[0], hf).check()
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForSequenceClassification.from_pretrained(hf).eval()
    assert model.config.id2label == dict(enumerate(CLASSES))
    tok = transformers.AutoTokenizer.from_pretrained(hf)
    enc = tok([passage], return_tensors="pt")
    # the config's num_classes=None is the train labels' count: 3 (the runner fills it in)
    ours = MODELS.build({**shipped_config("bert_tiny_genre").model.to_dict(),
                         "num_classes": 3}).eval()
    ours.load_state_dict(ckpt["state_dict"])
    with torch.no_grad():
        want = ours({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
        got = model(**enc).logits
    torch.testing.assert_close(got, want["logits"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options, message", [
    (["load_from=None", "model.num_classes=2"], "_dataloader.dataset has 3 labels (comedy, history, tragedy): set "
                              "model.num_classes=3"),
    (["load_from=None", "train_dataloader.dataset.data_files=shakespeare_genr"], "Did you mean 'shakespeare_genre'"),
    ([], "load_from.path='work_dirs/bert_tiny/iter_1500.pth': no such file. (Relative paths start "
         f"from {ROOT}.) It is written by training configs/bert_tiny.py: run `libai train "
         f"bert_tiny` first."),
])
def test_genre_mistakes_are_one_line(train, tmp_path, options, message):
    # found when the runner is built from the shipped config: before any step
    out = train("--work-dir", tmp_path, *(["--cfg-options", *options] if options else []))
    assert out.returncode == 2, out.stderr[-3000:]
    error = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and message in error[0], out.stderr[-3000:]
    assert "Traceback" not in out.stderr
