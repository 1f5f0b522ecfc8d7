"""The docs harness itself: output comparison, console and shell parsing, skip markers."""

from pathlib import Path

import pytest
from doc_blocks import parsers
from shell_blocks import compare_output, parse_console, split_commands
from sybil import Sybil


def test_messages_compare_exactly_with_whitespace_collapsed():
    shown = "error: key 'a' not found. Did you\nmean 'b'?"
    assert compare_output(shown, "error: key 'a' not found. Did you mean 'b'?\n") is None
    assert compare_output(shown, "error: key 'a' not found. Did you mean 'c'?") is not None


def test_ellipsis_and_figures_within_tolerance():
    shown = "...\n... val/accuracy: ~0.97 val/loss: 0.08±0.02 ..."
    log = "start\n12:00 INFO Iter(val) [2000/2000]  val/accuracy: 0.9721  val/loss: 0.0811  t: 1s"
    assert compare_output(shown, log) is None
    assert "0.5" in compare_output(shown, log.replace("0.9721", "0.5"))
    assert "0.2" in compare_output(shown, log.replace("0.0811", "0.2"))


def test_console_pairs_commands_with_their_output():
    text = "$ python a.py \\\n    --x 1\nline 1\nline 2\n$ python b.py\n"
    assert parse_console(text) == [("python a.py  --x 1", "line 1\nline 2"), ("python b.py", "")]
    with pytest.raises(AssertionError, match="before the first"):
        parse_console("output\n$ cmd")


def test_shell_commands_join_continuations_and_keep_heredocs():
    script = "# a comment\npython a.py \\\n  --x 1\ncat > f <<'EOF'\nk: v\nEOF\necho done\n"
    assert split_commands(script) == ["python a.py  --x 1", "cat > f <<'EOF'\nk: v\nEOF",
                                      "echo done"]


def _examples(tmp_path: Path, text: str):
    page = tmp_path / "page.md"
    page.write_text(text)
    return list(Sybil(parsers=parsers()).parse(page).examples())


def test_a_skip_needs_a_reason_and_a_block_below(tmp_path):
    ok, block = _examples(tmp_path, '<!-- skip: next "no network" -->\n```bash\npip x\n```\n')
    assert ok.region.parsed == ("next", '"no network"')
    bad = _examples(tmp_path, "<!-- skip: next -->\n```bash\nls\n```\n")[0]
    assert "needs a reason" in bad.region.parsed
    far = _examples(tmp_path, '<!-- skip: next "x" -->\n\ntext\n\n```bash\nls\n```\n')[0]
    assert "directly above" in far.region.parsed


def test_a_fence_without_a_known_language_fails(tmp_path):
    (example,) = _examples(tmp_path, "```\nsome output\n```\n\n```text\nnot run\n```\n")
    assert "use one of" in example.region.parsed
