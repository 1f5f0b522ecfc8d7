"""The docs harness itself: output comparison, console and shell parsing, skip markers."""

import re
from collections import defaultdict
from pathlib import Path

import pytest
from doc_blocks import parsers
from shell_blocks import (
    apply_output_options,
    compare_output,
    output_options_above,
    parse_console,
    parse_output_options,
    split_commands,
)
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


def test_a_text_block_showing_a_run_s_output_fails_unless_skipped_with_a_reason(tmp_path):
    # docs/finetune.md showed "Loaded 37 of 39" in a text block for months while the run said
    # "Loaded 39 of 41": text blocks were never compared. Output goes in a console block.
    report = ("INFO    Loaded weights from work_dirs/bert_tiny/iter_1500.pth (iteration 1500)\n"
              "Loaded 37 of 39 model entries from the checkpoint.\n")
    (shown,) = _examples(tmp_path, f"```text\n{report}```\n\n```text\nwork_dirs/\n  a.pth\n```\n")
    assert "shows a run's output" in shown.region.parsed and "console block" in shown.region.parsed
    for line in ("12:00:01 WARNING Stopped by SIGTERM", "error: no such key",
                 "Loaded 38 of 50 model entries from the checkpoint."):
        assert len(_examples(tmp_path, f"```text\n{line}\n```\n")) == 1, line
    skip, skipped = _examples(tmp_path, f'<!-- skip: next "a 4-minute run" -->\n```text\n{report}```\n')
    # the marker skips this block (listed with the skipped ones), not the next block that runs
    assert skip.region.parsed == ("next", '"a 4-minute run"')
    assert "shows a run's output" in skipped.region.parsed


def test_a_fence_without_a_known_language_fails(tmp_path):
    (example,) = _examples(tmp_path, "```\nsome output\n```\n\n```text\nnot run\n```\n")
    assert "use one of" in example.region.parsed


LOG = """08:17:18 INFO    Hooks, in priority order: RuntimeInfoHook(10)
08:17:21 INFO    Iter(val) [100/100]  val/accuracy: 0.7967  val/loss: 0.8523  duration: 0.02s
08:17:22 INFO    New best val/accuracy = 0.796657: saved best_val_accuracy_iter_100.pth
08:17:22 INFO    Test (iteration 100)  test/accuracy: 0.7370  test/loss: 0.9156  samples: 270
"""


def test_output_options_let_a_block_show_real_lines():
    shown = ("12:00:01 INFO    Iter(val) [100/100]  val/accuracy: 0.7812  val/loss: 0.8611  "
             "duration: 1.50s\n"
             "12:00:02 INFO    Test (iteration 100)  test/accuracy: 0.7301  test/loss: 0.9001  "
             "samples: 270")
    options = parse_output_options(" excerpt; figures ±0.02; duration: any ")
    assert compare_output(apply_output_options(shown, options), LOG) is None
    strict = parse_output_options("excerpt; figures ±0.001; duration: any")
    assert "tolerance" in compare_output(apply_output_options(shown, strict), LOG)
    per_label = parse_output_options("excerpt; val/accuracy: ±2%; val/loss: ±0.01; "
                                     "test/accuracy: ±0.01; test/loss: ±0.02; duration: any")
    assert compare_output(apply_output_options(shown, per_label), LOG) is None
    # integers compare exactly, and without `excerpt` the lines around count
    assert compare_output(apply_output_options(shown.replace("270", "271"), options), LOG)
    no_excerpt = parse_output_options("figures ±0.02; duration: any")
    assert compare_output(apply_output_options(shown, no_excerpt), LOG) is not None


def test_output_options_are_read_from_the_comment_above_the_block():
    text = "x\n<!-- output: excerpt; figures ±10% -->\n```console\n$ a\n```\n\n```console\n"
    first, second = text.index("```console"), text.rindex("```console")
    assert output_options_above(text, first).excerpt
    assert output_options_above(text, first).figures == "10%"
    assert not output_options_above(text, second).excerpt
    with pytest.raises(AssertionError, match="write 'excerpt'"):
        parse_output_options("figures 0.02")


def test_an_output_comment_must_parse_and_sit_above_a_block(tmp_path):
    text = "<!-- output: excerpt -->\n\ntext\n\n<!-- output: nonsense -->\n```console\n$ a\n```\n"
    problems = [e.region.parsed for e in _examples(tmp_path, text)
                if isinstance(e.region.parsed, str)]
    assert any("directly above" in p for p in problems)
    assert any("write 'excerpt'" in p for p in problems)


def test_label_any_takes_any_word_after_the_label():
    shown = "error: Searched the folder /home/you/libai/my_registry and the directory /home/you, then"
    got = "error: Searched the folder /tmp/libai_docs_1/my_registry and the directory /tmp/x, then"
    options = parse_output_options("folder any; directory any")
    assert compare_output(apply_output_options(shown, options), got) is None
    assert compare_output(apply_output_options(shown, options), got.replace("then", "and")) is not None


def test_a_label_is_a_whole_word():
    options = parse_output_options("checkpoints in any")
    shown = "the only checkpoints in /home/you/w are damaged or incomplete"
    assert apply_output_options(shown, options).endswith("damaged or incomplete")
    assert compare_output(apply_output_options(shown, options), shown.replace("/home/you", "/x")) is None


def test_an_excerpt_line_may_end_in_a_full_stop():
    options = parse_output_options("excerpt")
    shown = "12:00:00 WARNING resume: moved iter_3.pth to *.damaged, every byte kept."
    got = "start\n08:46:16 WARNING resume: moved iter_3.pth to *.damaged, every byte kept.\nend"
    assert compare_output(apply_output_options(shown, options), got) is None


REPO = Path(__file__).resolve().parents[2]
_HEADED_BLOCK = re.compile(r"```(?:python|yaml|json)\n#\s+([\w./-]+\.(?:py|ya?ml|json))\b[^\n]*\n(.*?)```",
                           re.DOTALL)


def test_no_two_pages_write_the_same_file_with_different_contents():
    """A reader follows the pages in one checkout: a file one page writes must not be another
    page's file with other contents (README's my_project/my_run.py was also registry.md's)."""
    written = defaultdict(lambda: defaultdict(set))  # path -> page -> contents
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for m in _HEADED_BLOCK.finditer(page.read_text()):
            written[m.group(1)][page.name].add(m.group(2).strip())
    clashes = {
        path: sorted(pages)
        for path, pages in written.items()
        if len(pages) > 1 and len(set().union(*pages.values())) > 1
    }
    assert not clashes, f"files written with different contents by these pages: {clashes}"
