"""Every tool that reads weights reads a sharded checkpoint (``iter_N.pth`` + ``iter_N.dcp/``, as
a pipeline, FSDP or tensor-parallel run writes it) as it reads the same weights in one file:
generate, predict, test (``load_from``) and libai2hf. CPU, in this process (run_tool); the
sharded copy is made by ``convert_checkpoint.py file2sharded`` (DCP's one-process writer), which
a multi-process run's checkpoint reads like (tests/parallel/test_parallel_cli.py).
"""

import os

import pytest
import torch

from libai.checkpoint import load_checkpoint, model_state_for_saving, save_checkpoint
from libai.config import Config
from libai.registry import MODELS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONVERT = "tools/convert_checkpoint.py"


def whole_and_sharded(run_tool, folder, cfg_text, meta=None):
    """A random model of ``cfg_text`` saved in one file, and its sharded copy."""
    config = folder / "model.py"
    config.write_text(cfg_text)
    torch.manual_seed(0)
    model = MODELS.build(Config.fromfile(str(config)).model.to_dict())
    save_checkpoint({"state_dict": model_state_for_saving(model), "meta": meta or {}},
                    folder / "whole.pth")
    run_tool(CONVERT, "file2sharded", folder / "whole.pth", folder / "sharded.pth").check()
    assert load_checkpoint(folder / "sharded.pth")["state_dict"] == {}
    return config, folder / "whole.pth", folder / "sharded.pth"


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    from tool_runs import run_tool  # the module fixture runs the tools in this process too

    return whole_and_sharded(run_tool, tmp_path_factory.mktemp("gpt"),
                             '_base_ = "libai::gpt2_tiny.py"\n'
                             'model = dict(hidden_size=32, num_layers=1, num_heads=2)\n')


def test_generate_reads_a_sharded_checkpoint(run_tool, gpt):
    config, whole, sharded = gpt
    args = ("--prompt", "ROMEO:", "--max-new-tokens", "8", "--greedy")
    want = run_tool("tools/generate.py", config, whole, *args).check()
    got = run_tool("tools/generate.py", config, sharded, *args)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[-1] == want.stdout.splitlines()[-1]


def test_libai2hf_reads_a_sharded_checkpoint(run_tool, gpt, tmp_path):
    config, whole, sharded = gpt
    run_tool(CONVERT, "libai2hf", config, whole, tmp_path / "a").check()
    out = run_tool(CONVERT, "libai2hf", config, sharded, tmp_path / "b")
    assert out.returncode == 0, out.stderr
    weights = "model.safetensors"
    assert (tmp_path / "a" / weights).read_bytes() == (tmp_path / "b" / weights).read_bytes()


def test_test_tool_and_load_from_read_a_sharded_checkpoint(run_tool, gpt, tmp_path):
    config, whole, sharded = gpt
    options = ("--cfg-options", "test_cfg.limit_batches=1", "test_dataloader.batch_size=2",
               "test_dataloader.dataset.seq_length=16", "+default_hooks.logger.plot=False")
    lines = []
    for ckpt in (whole, sharded):
        out = run_tool("tools/test.py", config, ckpt, "--work-dir", tmp_path / ckpt.stem, *options)
        assert out.returncode == 0, out.output[-3000:]
        lines.append([line.split("INFO", 1)[1].split("duration")[0]
                      for line in out.output.splitlines() if "test/" in line and "INFO" in line])
    assert lines[0] and lines[0] == lines[1]


def test_predict_reads_a_sharded_checkpoint(run_tool, tmp_path):
    classes = ["comedy", "history", "tragedy"]
    config, whole, sharded = whole_and_sharded(
        run_tool, tmp_path,
        f'_base_ = "{ROOT}/configs/bert_tiny_genre.py"\n'
        'model = dict(num_classes=3, num_layers=1)\n',
        meta={"dataset_meta": {"classes": classes}})
    passage = "KING HENRY: Once more unto the breach, dear friends, once more"
    want = run_tool("tools/predict.py", config, whole, passage, "--top-k", "3").check()
    got = run_tool("tools/predict.py", config, sharded, passage, "--top-k", "3")
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


def test_predict_file_keeps_a_fields_line_breaks_and_prints_one_line_per_input(run_tool, tmp_path):
    """``predict --file``: a quoted CSV field with line breaks reaches the model and --out whole
    (records.py reads over the file); the printed line shows it on one line."""
    import json

    config, whole, _ = whole_and_sharded(
        run_tool, tmp_path, f'_base_ = "{ROOT}/configs/bert_tiny_genre.py"\n'
        'model = dict(num_classes=3, num_layers=1)\n',
        meta={"dataset_meta": {"classes": ["comedy", "history", "tragedy"]}})
    verse = "A tedious brief scene of young Pyramus\nAnd his love Thisbe"
    (tmp_path / "verse.csv").write_text(f'text,label\n"{verse}",comedy\nplain,tragedy\n')
    out = run_tool("tools/predict.py", config, whole, "--file", tmp_path / "verse.csv",
                   "--out", tmp_path / "p.jsonl").check()
    assert out.stdout.splitlines()[0].endswith("\tA tedious brief scene of young Pyramus And his "
                                               "love Thisbe")
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == [verse, "plain"]
