"""Every fenced block of README.md and docs/*.md is a test, collected and run with Sybil.

Why Sybil: it parses Markdown into regions with documented extension points, so one harness
runs Python (plain blocks and ``>>>`` sessions), shell and console blocks with their shown
output, keeps one namespace and one setup/teardown per document (a page's blocks build on one
another), and has a skip directive written as an HTML comment that GitHub does not render.
pytest-markdown-docs runs Python blocks only; pytest-codeblocks runs Python and shell but has
no hook for our own output comparison (figures within a tolerance) or for in-process tools.

The rules (doc_blocks.py and shell_blocks.py have the details):

- ``python``: a ``>>>`` session is a doctest; a block headed ``# path/file.py`` is written to that
  file (a config is loaded and checked, a module only compiled; a later block uses it), and one
  headed with a file of the repository must show it as it is; a block assigning ``_base_`` is
  loaded as a config, one made only of top-level config keys is checked as a fragment on top of
  configs/digits_mlp.py; anything else is executed. A doctest's output compares as a console
  block's does.
- ``bash``/``shell``: each command must exit with status 0. ``python tools/X.py ...`` runs in this
  process (as ``python`` would run it), which saves a torch import per command; other commands go
  to bash; ``pip install`` is refused (it needs the network: mark the block skipped).
- ``console``: ``$ command`` lines, each followed by the output it shows, compared with whitespace
  collapsed; a clock time (``08:24:08``, an ETA) matches any. A block shows real lines: an
  ``<!-- output: ... -->`` comment directly above it keeps the tolerances out of the reader's
  way, its parts separated by ``;``: ``excerpt`` (these lines among the printed ones, in
  order), ``figures ±T`` or ``±P%`` (every decimal figure within T), ``LABEL ±T`` (the figure
  after ``val/loss:``) and ``LABEL any`` (the word after ``duration:``: a time, a rate, a path). Above a python block it applies
  to the doctests' output. The older inline notation still works where a page has not moved:
  ``...`` is any text, ``~X`` a figure within 10%, ``X±T`` one within T.
- ``yaml``/``json``: parsed; headed ``# name.yaml`` they are written for later blocks.
- ``text``: shown only (trees, log excerpts). Any other fence, or none, fails.
- ``<!-- skip: next "reason" -->`` directly above a block skips it; the reason is required and
  shows in the skip list at the end of the run (``pytest -rs``).

Each document runs in a sandbox (a temp folder with configs/ copied and tools/ linked) that is its
working directory, so nothing is written into the repository. A reader follows the pages in a
checkout instead, so when a page ends, what it wrote must be what .gitignore covers (work_dirs/,
my_* files): anything else, or a new file under a linked folder, fails the page's last block at
teardown (doc_blocks._left_in_a_checkout). test_doc_blocks.py checks that no two pages write
one file with different contents.
"""

from pathlib import Path

from doc_blocks import parsers, setup_sandbox, teardown_sandbox
from sybil import Sybil
from sybil.integration.pytest import SybilFile

# README.md and pages/ (docs/) are links here: pytest visits only testpaths (tests/), and a link
# covers a new page in docs/ without a line to add.
HERE = Path(__file__).parent
DOCS = Sybil(parsers=parsers(), setup=setup_sandbox, teardown=teardown_sandbox, name="docs")


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".md" and file_path.parent in (HERE, HERE / "pages"):
        return SybilFile.from_parent(parent, path=file_path, sybils=[DOCS])
    return None


# A page's blocks share a namespace and a sandbox, so one xdist worker runs them in order: the
# scheduler of tests/conftest.py sends a page as one unit of work (the other tests go one by one).


def pytest_terminal_summary(terminalreporter):
    def on_a_page(report):  # by node id: under xdist the reports come without their fspath
        return report.nodeid.split("::")[0].endswith(".md")

    skipped = [r for r in terminalreporter.stats.get("skipped", []) if on_a_page(r)]
    ran = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])
           if on_a_page(r) and r.when == "call"]
    if not skipped and not ran:
        return
    terminalreporter.section("docs blocks")
    terminalreporter.write_line(f"{len(ran)} block(s) run, {len(skipped)} skipped:")
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        terminalreporter.write_line(f"  {report.nodeid}: {reason}")
