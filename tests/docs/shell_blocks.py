"""How ```bash, ```shell and ```console blocks run, and how shown output is compared."""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field

from sybil import Example
from tool_runs import run_tool

COMMAND_TIMEOUT_S = 300
# `~X` in shown output matches a figure within this relative tolerance; `X±T` within T
APPROX_REL_TOL = 0.10
_TOOL = re.compile(r"(tools|benchmarks)/[\w-]+\.py$")
_SHELL_OPS = set("|&;<>()`$*")


# ------------------------------------------------------------------------------- shell
def split_commands(script: str) -> list[str]:
    """Logical commands of a shell block: `\\` continuations joined, heredocs kept whole,
    comment-only lines dropped."""
    commands, lines = [], script.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + " " + lines[i].strip()
            i += 1
        heredoc = re.search(r"<<-?\s*'?\"?(\w+)", line)
        if heredoc:
            body = []
            while i < len(lines) and lines[i].strip() != heredoc.group(1):
                body.append(lines[i])
                i += 1
            line = "\n".join([line, *body, heredoc.group(1)])
            i += 1
        commands.append(line)
    return commands


def run_command(command: str) -> tuple[int, str]:
    """Run one command in the sandbox; return (exit status, stdout and stderr together).

    `python tools/X.py ...` (or benchmarks/) runs in this process, as `python` would run it
    (`sys.argv`, the script's folder first on `sys.path`, `__main__`), which saves a torch import
    (2-4 s here) per command; anything else goes to bash."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words = list(lexer)
    except ValueError:
        words = []
    if re.search(r"\bpip\s+install\b", command):
        raise AssertionError(f"`{command}` installs packages: mark its block "
                             f'<!-- skip: next "installs packages: needs the network" -->')
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    operators = any(set(w) <= _SHELL_OPS for w in words) or "*" in command or "$" in command
    if len(words) >= 2 and words[0] == "python" and _TOOL.match(words[1]) and not operators:
        return _run_in_process(words[1], words[2:], env)
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S)
    return proc.returncode, proc.stdout + proc.stderr


def _run_in_process(script: str, args: list[str], env: dict) -> tuple[int, str]:
    run = run_tool(script, *args, cwd=os.getcwd(), env=env)
    if run.exception is not None:
        raise AssertionError(f"{script} {shlex.join(args)} raised {run.exception!r}; output:\n"
                             f"{run.stdout}{run.stderr}") from run.exception
    return run.returncode, run.stdout + run.stderr


def evaluate_shell(example: Example) -> str | None:
    """```bash / ```shell: every command must exit with status 0."""
    for command in split_commands(str(example.parsed)):
        status, output = run_command(command)
        if status != 0:
            return f"`{command}` exited with status {status}; output:\n{output[-4000:]}"
    return None


# ------------------------------------------------------------------------------- console
def evaluate_console(example: Example) -> str | None:
    """```console: `$ command` lines, each followed by the output it shows.

    Output is compared with whitespace runs (line breaks too) collapsed, so wrapped messages
    match; `...` stands for any text (also several lines); `~X` for a figure within
    APPROX_REL_TOL of X; `X±T` for one within T of X; a clock time (`08:17:21`, an ETA `0:00:04`)
    for any clock time. An `<!-- output: ... -->` comment directly above the block lets it show
    real lines instead of that notation (:func:`parse_output_options`). A command must exit with
    status 0 unless the output it shows has an `error:` line."""
    options = output_options_above(example.document.text, example.region.start)
    for command, expected in parse_console(str(example.parsed)):
        status, output = run_command(command)
        problem = compare_output(apply_output_options(expected, options), output)
        if problem is None and status != 0 and "error" not in expected.lower():
            problem = f"exited with status {status}"
        if problem:
            return f"`{command}`: {problem}\n--- shown:\n{expected}\n--- got:\n{output[-4000:]}"
    return None


def parse_console(text: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\") and i < len(lines):
                command = command[:-1] + " " + lines[i].lstrip("> ").strip()
                i += 1
            pairs.append((command, []))
        elif pairs:
            pairs[-1][1].append(line)
        elif line.strip():
            raise AssertionError(f"console block: output before the first `$ ` command: {line!r}")
    return [(c, "\n".join(out)) for c, out in pairs]


_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_CLOCK = r"\d{1,3}:\d\d:\d\d"  # a time of day or an ETA: never the same twice
_ANY_WORD = "\x00"  # what `LABEL any` leaves in the shown output: any word there
_GAP = "\x01"  # what `excerpt` puts between shown lines: any text (a `...` would merge with a
# line's own final dots)
_TOKEN = re.compile(
    rf"(\.\.\.|{_GAP})|(?<![\d:])({_CLOCK})(?![\d:])|~({_NUMBER})|({_NUMBER})±({_NUMBER})"
    rf"|({_ANY_WORD})"
)


# ------------------------------------------------------------------------------- output options
@dataclass
class OutputOptions:
    """What an `<!-- output: ... -->` comment above a console block (or a doctest) declares."""

    excerpt: bool = False  # the shown lines are some of the printed ones, in order
    figures: str | None = None  # tolerance of every decimal figure: "0.02" or "10%"
    labels: dict[str, str] = field(default_factory=dict)  # label -> tolerance, or "any"


OUTPUT_COMMENT = re.compile(r"^[ \t]*<!--\s*output:(.*?)-->", re.DOTALL | re.MULTILINE)
_TOLERANCE = re.compile(rf"±({_NUMBER}%?)|any")
# a decimal figure that is not part of a word, a version or a path (`v1.2.3`, `iter_2.pth`)
_DECIMAL = re.compile(r"(?<![\w.±~/])(-?\d+\.\d+(?:[eE][-+]?\d+)?)(?![\w.]*\w|±)")


def parse_output_options(text: str) -> OutputOptions:
    """Parse `<!-- output: excerpt; figures ±0.02; val/loss: ±10%; duration: any -->`.

    The parts, separated by `;`, each optional:

    - `excerpt`: the block shows some of the printed lines, in order, others may come before,
      between and after them (a reader sees real lines, not `...` lines).
    - `figures ±T` (or `±P%`): every decimal figure shown (`0.9781`; integers compare exactly)
      matches a printed one within T (or P percent of it).
    - `LABEL ±T`: the figure right after LABEL (`val/loss:`) within T. `LABEL any`: the word
      right after LABEL is any word (a duration `0.02s`, a rate, a path that differs per machine).
    """
    options = OutputOptions()
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        if part == "excerpt":
            options.excerpt = True
            continue
        name, _, tolerance = part.rpartition(" ")
        if not name or not _TOLERANCE.fullmatch(tolerance):
            raise AssertionError(
                f"<!-- output: --> part {part!r}: write 'excerpt', 'figures ±T', 'LABEL ±T' or "
                f"'LABEL any' (T a number, or a percentage as ±10%)"
            )
        tolerance = tolerance.lstrip("±")
        if name == "figures":
            options.figures = tolerance
        else:
            options.labels[name.strip()] = tolerance
    return options


def output_options_above(text: str, start: int) -> OutputOptions:
    """The options of the `<!-- output: -->` comment directly above the fenced block that holds
    position `start` (a console block starts at its fence; a doctest inside one)."""
    line_end = text.find("\n", start)
    fences = list(re.finditer(r"^[ \t]*```", text[: line_end if line_end >= 0 else None], re.M))
    above = text[: fences[-1].start() if fences else start].rstrip()
    matches = list(OUTPUT_COMMENT.finditer(above))
    if not matches or matches[-1].end() != len(above):
        return OutputOptions()
    return parse_output_options(matches[-1].group(1))


def apply_output_options(expected: str, options: OutputOptions) -> str:
    """The shown output rewritten in the notation :func:`compare_output` reads."""
    if options.labels:
        labels = "|".join(re.escape(k) for k in sorted(options.labels, key=len, reverse=True))

        def per_label(m: re.Match) -> str:
            tolerance = options.labels[m.group(1)]
            if tolerance == "any":  # the word after the label: a time, a rate, a path
                return f"{m.group(1)}{m.group(2)}{_ANY_WORD}"
            figure = re.match(_NUMBER, m.group(3))
            if figure is None:
                return m.group(0)
            tolerated = _with_tolerance(figure.group(0), tolerance)
            return f"{m.group(1)}{m.group(2)}{tolerated}{m.group(3)[figure.end():]}"

        # a whole label (not `in` of `incomplete`, not `val/loss:` of `xval/loss:`); after a
        # quote or a brace is fine
        expected = re.sub(rf"(?<![\w/])({labels})(?!\w)(\s*)(\S+)", per_label, expected)
    if options.figures:
        expected = _DECIMAL.sub(lambda m: _with_tolerance(m.group(1), options.figures), expected)
    if options.excerpt:
        lines = [line for line in expected.splitlines() if line.strip()]
        # no whitespace around the gaps: a shown line may be the first or the last printed
        expected = _GAP.join(["", *lines, ""]) if lines else ""
    return expected


def _with_tolerance(figure: str, tolerance: str) -> str:
    if tolerance.endswith("%"):
        tolerance = f"{abs(float(figure)) * float(tolerance[:-1]) / 100:.6g}"
    return f"{figure}±{tolerance}"


def compare_output(expected: str, actual: str) -> str | None:
    """None when `actual` shows what `expected` says (see :func:`evaluate_console`)."""
    expected = " ".join(expected.split())
    actual = " ".join(actual.split())
    if not expected:
        return None
    pattern, checks, pos = [], [], 0
    for m in _TOKEN.finditer(expected):
        pattern.append(re.escape(expected[pos:m.start()]))
        if m.group(1):
            pattern.append(".*?")
        elif m.group(2):
            pattern.append(_CLOCK)
        elif m.group(6):
            pattern.append(r"\S+")
        else:
            pattern.append(f"({_NUMBER})")
            if m.group(3):
                value = float(m.group(3))
                checks.append((m.group(0), value, APPROX_REL_TOL * abs(value)))
            else:
                checks.append((m.group(0), float(m.group(4)), float(m.group(5))))
        pos = m.end()
    pattern.append(re.escape(expected[pos:]))
    match = re.fullmatch("".join(pattern), actual, re.DOTALL)
    if match is None:
        return "output differs from the one shown"
    for (shown, value, tol), got in zip(checks, match.groups(), strict=True):
        if not math.isclose(float(got), value, rel_tol=0, abs_tol=tol + 1e-12):
            return f"figure {got} is not {shown} (tolerance {tol:g})"
    return None
