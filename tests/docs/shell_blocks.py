"""How ```bash, ```shell and ```console blocks run, and how shown output is compared."""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

from sybil import Example

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
    buffer = io.StringIO()
    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_env = {k: os.environ.get(k) for k in env}
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    os.environ.update(env)
    status = 0
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if isinstance(e.code, str):
            buffer.write(e.code + "\n")
    except BaseException as e:
        raise AssertionError(f"{script} {shlex.join(args)} raised {e!r}; output:\n"
                             f"{buffer.getvalue()}") from e
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return status, buffer.getvalue()


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
    APPROX_REL_TOL of X; `X±T` for one within T of X. A command must exit with status 0 unless
    the output it shows has an `error:` line."""
    for command, expected in parse_console(str(example.parsed)):
        status, output = run_command(command)
        problem = compare_output(expected, output)
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
_TOKEN = re.compile(rf"(\.\.\.)|~({_NUMBER})|({_NUMBER})±({_NUMBER})")


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
        else:
            pattern.append(f"({_NUMBER})")
            if m.group(2):
                value = float(m.group(2))
                checks.append((m.group(0), value, APPROX_REL_TOL * abs(value)))
            else:
                checks.append((m.group(0), float(m.group(3)), float(m.group(4))))
        pos = m.end()
    pattern.append(re.escape(expected[pos:]))
    match = re.fullmatch("".join(pattern), actual, re.DOTALL)
    if match is None:
        return "output differs from the one shown"
    for (shown, value, tol), got in zip(checks, match.groups(), strict=True):
        if not math.isclose(float(got), value, rel_tol=0, abs_tol=tol + 1e-12):
            return f"figure {got} is not {shown} (tolerance {tol:g})"
    return None
