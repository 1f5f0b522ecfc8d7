"""tools/preprocess_text.py: train or load a tokenizer, write the corpus, report; errors in one line."""

import importlib.util
import json
from pathlib import Path

import pytest

from libai.data.text import IndexedTokenDataset, TextTokenizer, load_corpus

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "preprocess_text.py"
TEXT = "\n\n".join(f"Sentence one of document {i}.\nSentence two, {i}!" for i in range(30)) + "\n"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("preprocess_text_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def inputs(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text(TEXT, encoding="utf-8")
    jsonl = tmp_path / "b.jsonl"
    jsonl.write_text("".join(json.dumps({"body": f"json doc {i}\nline"}) + "\n" for i in range(5)))
    return text, jsonl


def test_train_wordpiece_and_write(tool, inputs, tmp_path, capsys):
    text, _ = inputs
    prefix = tmp_path / "out" / "corpus"
    tool.main(
        [
            str(text),
            "--output-prefix",
            str(prefix),
            "--train-tokenizer",
            "wordpiece",
            "--vocab-size",
            "300",
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert "Trained a wordpiece tokenizer (300 tokens)" in out
    assert "Wrote 30 documents, 60 sentences," in out and "(uint16)" in out
    for suffix in (".bin", ".idx", ".tokenizer.json", ".vocab.txt"):
        assert f"{prefix}{suffix}" in out and Path(f"{prefix}{suffix}").is_file()
    corpus = load_corpus(prefix)  # the prefix opens with the tokenizer written beside it
    assert len(corpus.tokens) == 30 and corpus.tokenizer.kind == "wordpiece"
    assert corpus.tokenizer.decode(corpus.tokens[0]).startswith("sentence one of document 0")


def test_bpe_append_eod_jsonl_with_a_key(tool, inputs, tmp_path, capsys):
    _, jsonl = inputs
    prefix = tmp_path / "c"
    tool.main(
        [
            str(jsonl),
            "--output-prefix",
            str(prefix),
            "--train-tokenizer",
            "bpe",
            "--vocab-size",
            "300",
            "--json-key",
            "body",
            "--append-eod",
            "--workers",
            "0",
        ]
    )
    assert "Wrote 5 documents, 10 sentences" in capsys.readouterr().out
    ds = IndexedTokenDataset(prefix)
    tok = TextTokenizer.load(f"{prefix}.tokenizer.json")
    assert all(ds[i][-1] == tok.eod_id for i in range(len(ds)))
    assert not Path(f"{prefix}.vocab.txt").exists()


def test_cased_wordpiece_keeps_case(tool, inputs, tmp_path):
    tool.main(
        [
            str(inputs[0]),
            "--output-prefix",
            str(tmp_path / "c"),
            "--train-tokenizer",
            "wordpiece",
            "--vocab-size",
            "300",
            "--cased",
        ]
    )
    corpus = load_corpus(tmp_path / "c")
    assert corpus.tokenizer.decode(corpus.tokens[0]).startswith("Sentence one")


def test_given_tokenizer_and_several_inputs(tool, inputs, tmp_path, capsys):
    text, jsonl = inputs
    tok = TextTokenizer.train(TEXT.splitlines(), "wordpiece", 300)
    tok.save(tmp_path / "tok")
    tool.main(
        [
            str(text),
            str(jsonl),
            "--output-prefix",
            str(tmp_path / "c"),
            "--tokenizer",
            str(tmp_path / "tok"),
            "--json-key",
            "body",
        ]
    )
    assert "Wrote 35 documents" in capsys.readouterr().out
    assert (
        Path(tmp_path / "c.tokenizer.json").read_text()
        == (tmp_path / "tok" / "tokenizer.json").read_text()
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--train-tokenizer", "bpe"], "--train-tokenizer needs --vocab-size"),
        (["--tokenizer", "t.json", "--vocab-size", "5"], "go with --train-tokenizer"),
        ([], "one of the arguments --tokenizer --train-tokenizer is required"),
    ],
)
def test_argument_errors(tool, inputs, extra, message, capsys):
    with pytest.raises(SystemExit) as e:
        tool.parse_args([str(inputs[0]), "--output-prefix", "x", *extra])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_user_error_is_one_line_and_exit_2(run_process, tmp_path):
    # the script's own process (its one in the suite): exit status 2, one line, no traceback
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": broken\n', encoding="utf-8")
    out = run_process(TOOL, bad, "--output-prefix", tmp_path / "c", "--train-tokenizer", "bpe",
                      "--vocab-size", "300")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: {bad}, line 2: not valid JSON (Expecting value, column 10). Each line of a "
        'JSON-lines file must be one object, e.g. {"text": "..."}.'
    ]
    assert not list(tmp_path.glob("c*"))
