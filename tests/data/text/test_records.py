"""read_records: a labeled file reads as its author wrote it (a quoted CSV field keeps its line
breaks), and every error names the file as given and the file line, not the record number."""

from __future__ import annotations

import json

import pytest

from libai.data.text.records import read_records
from libai.utils.errors import DataError

VERSE = "A tedious brief scene of young Pyramus\nAnd his love Thisbe; very tragical mirth."


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_a_quoted_field_keeps_its_line_breaks(tmp_path, ending):
    field = VERSE.replace("\n", ending)
    text = ending.join(["text,label", f'"{field}",comedy', "plain row,tragedy", ""])
    (tmp_path / "verse.csv").write_bytes(text.encode())
    records = read_records(tmp_path / "verse.csv")
    assert [r["text"] for r in records] == [field, "plain row"]
    # where a record starts in the file: the second record is on line 4, not record 3
    assert [r["_where"].rsplit(" ", 1)[1] for r in records] == ["2", "4"]


def test_a_tsv_field_keeps_its_line_breaks(tmp_path):
    (tmp_path / "v.tsv").write_text(f'text\tlabel\n"{VERSE}"\tcomedy\n', encoding="utf-8")
    assert read_records(tmp_path / "v.tsv")[0]["text"] == VERSE


def test_errors_name_the_file_as_given_and_its_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "bad.csv").write_text(f'text,label\n"{VERSE}",comedy\nshort\n',
                                               encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_records("data/bad.csv")
    assert str(e.value).startswith("data/bad.csv line 4 has 1 fields but the header has 2")
    with pytest.raises(DataError, match=r"^data/missing\.csv not found|Labeled data file data/missing\.csv"):
        read_records("data/missing.csv")


def test_an_unclosed_quote_is_one_line_naming_the_file(tmp_path):
    (tmp_path / "open.csv").write_text('text,label\n"never closed,comedy\nmore,tragedy\n',
                                       encoding="utf-8")
    with pytest.raises(DataError) as e:
        read_records(str(tmp_path / "open.csv"))
    message = str(e.value)
    assert message.startswith(f"{tmp_path / 'open.csv'} line 2 has 1 fields")
    assert "a quote opened there runs on to line 3: close it" in message
    assert "\n" not in message


def test_jsonl_lines_end_at_newline_only(tmp_path):
    # U+2028 (line separator) is valid inside a JSON string; str.splitlines() would cut there
    rows = [{"text": "one\u2028two", "label": "a"}, {"text": "three", "label": "b"}]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                              for r in rows), encoding="utf-8")
    records = read_records(tmp_path / "r.jsonl")
    assert [r["text"] for r in records] == ["one\u2028two", "three"]
