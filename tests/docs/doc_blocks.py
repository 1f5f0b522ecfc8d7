"""How a fenced block of README.md or docs/*.md is run (see conftest.py for the rules in short).

Each document runs in its own sandbox: a temp folder holding a copy of ``configs/`` and links to
``tools/``, ``benchmarks/`` and ``docs/``, which is the working directory while its blocks run, so
the blocks' work dirs and files never land in the repository. Blocks of one document run in order
and share one Python namespace and one sandbox, as a reader following the page would.
"""

from __future__ import annotations

import ast
import contextlib
import io
import math
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sybil import Example, Region
from sybil.parsers.abstract.lexers import LexerCollection
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

REPO = Path(__file__).resolve().parents[2]
SANDBOX_KEY = "__docs_sandbox__"
# languages the harness runs; `text` is shown, never run; any other fence is an error
RUN_LANGUAGES = ("python", "bash", "shell", "console", "yaml", "json")
NOT_RUN = ("text",)
COMMAND_TIMEOUT_S = 300
# `~X` in shown output matches a figure within this relative tolerance; `X±T` within T
APPROX_REL_TOL = 0.10
_FILE_HEADER = re.compile(r"#\s+([\w./-]+\.(?:py|ya?ml|json))\b")
_TOOL = re.compile(r"(tools|benchmarks)/[\w-]+\.py$")
_SHELL_OPS = set("|&;<>()`$*")


# ------------------------------------------------------------------------------- sandbox
def setup_sandbox(namespace: dict) -> None:
    """Make the document's sandbox and enter it (Sybil calls this before a document's blocks)."""
    root = Path(tempfile.mkdtemp(prefix="libai_docs_"))
    shutil.copytree(REPO / "configs", root / "configs")
    for name in ("tools", "benchmarks", "docs", "requirements", "README.md", "pyproject.toml"):
        if (REPO / name).exists():
            (root / name).symlink_to(REPO / name)
    namespace[SANDBOX_KEY] = dict(
        root=root, cwd=os.getcwd(), sys_path=list(sys.path), modules=set(sys.modules),
        registries={reg: set(reg._module_dict) for reg in _registries()},
    )
    os.chdir(root)


def teardown_sandbox(namespace: dict) -> None:
    """Leave the sandbox and forget what its blocks imported or registered."""
    state = namespace.pop(SANDBOX_KEY)
    os.chdir(state["cwd"])
    sys.path[:] = state["sys_path"]
    root = str(state["root"])
    for name in set(sys.modules) - state["modules"]:
        if str(getattr(sys.modules[name], "__file__", None) or "").startswith(root):
            del sys.modules[name]
    for reg, before in state["registries"].items():
        for key in set(reg._module_dict) - before:
            if not getattr(reg._module_dict[key], "__module__", "").startswith("libai"):
                del reg._module_dict[key]  # a class a block defined, not one libai imported late
    shutil.rmtree(root, ignore_errors=True)


def _registries() -> list:
    import libai.registry as r

    found, todo = [], [getattr(r, n) for n in r.__all__ if isinstance(getattr(r, n), r.Registry)]
    while todo:
        reg = todo.pop()
        if reg not in found:
            found.append(reg)
            todo.extend(reg.children)
    return found


def _sandbox_path(example: Example, relative: str) -> Path:
    root = example.namespace[SANDBOX_KEY]["root"]
    path = (root / relative).resolve()
    if root.resolve() not in path.parents:
        raise AssertionError(f"block writes outside its sandbox: {relative!r}")
    return path


# ------------------------------------------------------------------------------- parsers
class ReasonedSkipParser(SkipParser):
    """Sybil's `<!-- skip: next "reason" -->`, where the reason is required and the marker must
    sit directly above a fenced block."""

    def __call__(self, document):
        for region in super().__call__(document):
            action, reason = region.parsed
            following = document.text[region.end:].lstrip()
            problem = None
            if action in ("next", "start") and not (reason or "").strip():
                problem = f"'skip: {action}' needs a reason: <!-- skip: {action} \"why\" -->"
            elif action == "next" and not following.startswith("```"):
                problem = "'skip: next' must sit directly above a fenced block"
            if problem:
                yield Region(region.start, region.end, problem, _fail_with_parsed)
            else:
                yield region


def _fail_with_parsed(example: Example) -> str:
    return example.parsed


class PythonBlockParser(PythonCodeBlockParser):
    """```python blocks: `>>>` sessions run as doctests; the rest by :func:`evaluate_python`."""

    def __init__(self) -> None:
        super().__init__()
        self.codeblock_parser = CodeBlockParser("python", evaluate_python)


class UnlabeledFenceParser:
    """A fence with no language, or one the harness does not know, fails: nothing is left
    unrun without saying so (`text` marks what is not code)."""

    def __init__(self) -> None:
        info = re.compile(r"(?P<language>[^\n]*)$\n", re.MULTILINE)
        self.lexers = LexerCollection([RawFencedCodeBlockLexer(info, {"language": "language"})])

    def __call__(self, document):
        for region in self.lexers(document):
            language = region.lexemes["language"].strip()
            if language not in RUN_LANGUAGES + NOT_RUN:
                message = (f"fenced block with language {language!r}: use one of "
                           f"{', '.join(RUN_LANGUAGES)} (run) or text (not run)")
                yield Region(region.start, region.end, message, _fail_with_parsed)


def parsers() -> list:
    return [
        ReasonedSkipParser(),
        PythonBlockParser(),
        CodeBlockParser("bash", evaluate_shell),
        CodeBlockParser("shell", evaluate_shell),
        CodeBlockParser("console", evaluate_console),
        CodeBlockParser("yaml", evaluate_data),
        CodeBlockParser("json", evaluate_data),
        UnlabeledFenceParser(),
    ]


# ------------------------------------------------------------------------------- python
def evaluate_python(example: Example) -> None:
    """A block headed `# some/file.py` is that file: written, then loaded as a config unless it
    defines classes or functions (a module, which a later block imports). A block assigning
    `_base_` is a config; one made only of top-level config keys is a config fragment, checked
    on top of configs/digits_mlp.py. Anything else is executed."""
    source = str(example.parsed)
    first = source.split("\n", 1)[0]
    header = _FILE_HEADER.fullmatch(first.split("  ")[0].strip())
    tree = ast.parse(source)
    if header:
        path = _sandbox_path(example, header.group(1))
        if (REPO / header.group(1)).exists():
            raise AssertionError(f"block headed {header.group(1)!r} would replace the shipped "
                                 f"file: give the example another name")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        if path.suffix == ".py" and _defines_code(tree):
            compile(source, str(path), "exec")
            return
        _check_config(str(path))
        return
    kind = _config_kind(tree)
    if kind is None:
        code = compile("\n" * (example.line + example.parsed.line_offset) + source,
                       example.path, "exec")
        exec(code, example.namespace)
        example.namespace.pop("__builtins__", None)
        return
    base = "" if kind == "config" else '_base_ = "libai::digits_mlp.py"\n'
    path = _sandbox_path(example, f"configs/_doc_block_{example.line}.py")
    path.write_text(base + source)
    _check_config(str(path))


def _defines_code(tree: ast.Module) -> bool:
    return any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body)


def _config_kind(tree: ast.Module) -> str | None:
    """'config' (assigns `_base_`), 'fragment' (only top-level config keys) or None."""
    from libai.runner.build import TOP_LEVEL_KEYS

    names = []
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            return None
        for target in node.targets:
            if not isinstance(target, ast.Name):
                return None
            names.append(target.id)
    if "_base_" in names:
        return "config"
    if names and all(n in TOP_LEVEL_KEYS or n.startswith("_") for n in names):
        return "fragment"
    return None


def _check_config(path: str) -> None:
    """Load the config, refuse unknown top-level keys, import its custom_imports and check that
    every `type=` name is registered or importable."""
    from libai.config import Config
    from libai.runner.build import validate_top_level
    from libai.runner.imports import import_custom_modules

    cfg = Config.fromfile(path)
    if path.endswith((".yaml", ".yml", ".json")) and "model" not in cfg:
        return  # a data file that a later block merges or inherits
    validate_top_level(cfg)
    import_custom_modules(cfg.get("custom_imports"), path)
    for where, name in _type_names(cfg.to_dict(), ""):
        if not any(reg.get(name) is not None for reg in _quiet_registries(name)):
            raise AssertionError(f"{path}: {where}.type={name!r} is in no registry")


def _quiet_registries(name: str):
    for reg in _registries():
        try:
            reg.get(name)
        except Exception:
            continue
        yield reg


def _type_names(node, where: str):
    if isinstance(node, dict):
        if isinstance(node.get("type"), str):
            yield where or "<root>", node["type"]
        for key, value in node.items():
            yield from _type_names(value, f"{where}.{key}" if where else str(key))
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _type_names(value, f"{where}.{i}")


def evaluate_data(example: Example) -> None:
    """```yaml / ```json: parsed; headed `# name.yaml` (yaml) they are written to the sandbox."""
    import json

    import yaml

    source = str(example.parsed)
    header = _FILE_HEADER.fullmatch(source.split("\n", 1)[0].split("  ")[0].strip())
    if source.lstrip().startswith("{"):
        json.loads(source)
    else:
        yaml.safe_load(source)
    if header:
        path = _sandbox_path(example, header.group(1))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


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
