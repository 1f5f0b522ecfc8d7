"""How a fenced block of README.md or docs/*.md is run (see conftest.py for the rules in short).

Each document runs in its own sandbox: a temp folder holding a copy of ``configs/`` and links to
``tools/``, ``benchmarks/`` and ``docs/``, which is the working directory while its blocks run, so
the blocks' work dirs and files never land in the repository. Blocks of one document run in order
and share one Python namespace and one sandbox, as a reader following the page would.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import os
import re
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from shell_blocks import (
    OUTPUT_COMMENT,
    OutputOptions,
    apply_output_options,
    compare_output,
    evaluate_console,
    evaluate_shell,
    output_options_above,
    parse_output_options,
)
from sybil import Example, Region
from sybil.evaluators.doctest import OutputChecker
from sybil.parsers.abstract.lexers import LexerCollection
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

REPO = Path(__file__).resolve().parents[2]
SANDBOX_KEY = "__docs_sandbox__"
# languages the harness runs; `text` is shown, never run; any other fence is an error
RUN_LANGUAGES = ("python", "bash", "shell", "console", "yaml", "json")
NOT_RUN = ("text",)
_FILE_HEADER = re.compile(r"#\s+([\w./-]+\.(?:py|ya?ml|json))\b")


# ------------------------------------------------------------------------------- sandbox
def setup_sandbox(namespace: dict) -> None:
    """Make the document's sandbox and enter it (Sybil calls this before a document's blocks)."""
    root = Path(tempfile.mkdtemp(prefix="libai_docs_"))
    shutil.copytree(REPO / "configs", root / "configs")
    for name in LINKED:
        if (REPO / name).exists():
            (root / name).symlink_to(REPO / name)
    import torch

    namespace[SANDBOX_KEY] = dict(
        root=root, cwd=os.getcwd(), sys_path=list(sys.path), modules=set(sys.modules),
        untracked=_untracked_in_links(),
        registries={reg: set(reg._module_dict) for reg in _registries()},
        threads=torch.get_num_threads(), omp=os.environ.get("OMP_NUM_THREADS"),
    )
    # One intra-op thread: the pages' tiny models gain nothing from a second, and on a busy
    # machine two threads wait on each other (a 500-iteration digits run: 6.8 s vs 19.6 s).
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"  # and for the commands that go to bash
    os.chdir(root)


def teardown_sandbox(namespace: dict) -> None:
    """Leave the sandbox and forget what its blocks imported or registered."""
    import torch

    state = namespace.pop(SANDBOX_KEY)
    os.chdir(state["cwd"])
    torch.set_num_threads(state["threads"])
    if state["omp"] is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = state["omp"]
    sys.path[:] = state["sys_path"]
    root = str(state["root"])
    for reg, before in state["registries"].items():
        for key in set(reg._module_dict) - before:
            if _made_in_sandbox(reg._module_dict[key], root):
                del reg._module_dict[key]  # not entries that libai registered late (AdamW...)
    for name in set(sys.modules) - state["modules"]:
        if str(getattr(sys.modules[name], "__file__", None) or "").startswith(root):
            del sys.modules[name]
    _stop_children_in(root)
    left = _left_in_a_checkout(Path(root), state["untracked"])
    shutil.rmtree(root, ignore_errors=True)
    if left:
        raise AssertionError(
            "followed in a checkout, this page leaves files that `git status` shows: "
            + ", ".join(left[:20]) + ". Write them under work_dirs/ or name them my_* (both "
            "git-ignored), or add the path to .gitignore."
        )


# The sandbox links these; what a page writes through a link lands in the repository.
LINKED = ("tools", "benchmarks", "docs", "requirements", "README.md", "pyproject.toml")


def _untracked_in_links() -> set[str]:
    import subprocess

    out = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--", *LINKED],
                         cwd=REPO, capture_output=True, text=True)
    return set(out.stdout.splitlines())


def _left_in_a_checkout(root: Path, untracked_before: set[str]) -> list[str]:
    """What a reader following the page in a checkout would see in `git status`: the files the
    page wrote into its sandbox that .gitignore does not cover (the harness's own config
    fragments and the unchanged copy of configs/ aside), and new files under the linked
    folders."""
    import subprocess

    written = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in LINKED or path.is_dir() or path.is_symlink():
            continue
        if rel.parts[0] == "configs":
            shipped = REPO / rel
            if rel.name.startswith("_doc_block_") or (
                shipped.is_file() and shipped.read_bytes() == path.read_bytes()
            ):
                continue
        written.append(rel.as_posix())
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=REPO,
                             input="\n".join(written), capture_output=True, text=True)
    left = sorted(set(written) - set(ignored.stdout.splitlines()))
    return left + sorted(_untracked_in_links() - untracked_before)


def _stop_children_in(root: str) -> None:
    """End the processes the page's runs left behind in the sandbox (LoggerHook draws its plots
    in a process of its own, which would write into the folder after it is deleted)."""
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            args = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and root in args:
            pid = int(entry.name)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)


def _made_in_sandbox(obj, root: str) -> bool:
    """Defined by a block (exec'd or a doctest) or by a module a block wrote."""
    module = getattr(obj, "__module__", "") or ""
    if module in ("builtins", "__test__", "__main__"):
        return True
    return str(getattr(sys.modules.get(module), "__file__", None) or "").startswith(root)


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
            following = re.sub(r"^\s*-*-->", "", document.text[region.end:]).lstrip()
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
    """```python blocks: `>>>` sessions run as doctests; the rest by :func:`evaluate_python`.
    An `<!-- output: ... -->` comment above the block applies to its doctests' output."""

    def __init__(self) -> None:
        super().__init__(doctest_optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        self.codeblock_parser = CodeBlockParser("python", evaluate_python)
        self.checker = _ApproxChecker()
        self.doctest_parser.evaluator.runner._checker = self.checker

    def __call__(self, document):
        for region in super().__call__(document):
            if region.evaluator is self.doctest_parser.evaluator:
                region.evaluator = self._with_options(region.evaluator)
            yield region

    def _with_options(self, evaluator):
        def evaluate(example: Example):
            self.checker.options = output_options_above(example.document.text,
                                                        example.region.start)
            try:
                return evaluator(example)
            finally:
                self.checker.options = OutputOptions()

        return evaluate


class _ApproxChecker(OutputChecker):
    """doctest's comparison, and :func:`compare_output`'s when the output shows `~X` or `X±T`
    or the block has `<!-- output: ... -->` options."""

    options = OutputOptions()

    def check_output(self, want: str, got: str, optionflags: int) -> bool:
        if self.options != OutputOptions():
            return compare_output(apply_output_options(want, self.options), got) is None
        if "~" in want or "±" in want:
            return compare_output(want, got) is None
        return super().check_output(want, got, optionflags)


class OutputOptionsParser:
    """`<!-- output: ... -->` must parse and sit directly above a console or python block."""

    def __call__(self, document):
        for m in OUTPUT_COMMENT.finditer(document.text):
            following = document.text[m.end():].lstrip()
            problem = None
            try:
                parse_output_options(m.group(1))
            except AssertionError as e:
                problem = str(e)
            if not problem and not re.match(r"```(console|python)\n", following):
                problem = "'<!-- output: ... -->' must sit directly above a console or python block"
            if problem:
                yield Region(m.start(), m.end(), problem, _fail_with_parsed)


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


# What a run prints: a log line (a level after an optional clock), a one-line error, a load
# report. Shown in a `text` block it would never be compared, and goes stale unseen ("Loaded 37
# of 39" in docs/finetune.md while the run said "Loaded 39 of 41").
RUN_OUTPUT = re.compile(r"^(?:\d\d:\d\d:\d\d )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s"
                        r"|^error: |^Loaded \d+ of \d+ model entries", re.MULTILINE)


class ShownOutputParser:
    """A `text` block that shows a run's output fails: output belongs in a console block under
    its command, where the suite compares it; one that cannot run says why with a skip marker
    above it (and is then listed with the skipped blocks)."""

    def __init__(self) -> None:
        self.lexers = LexerCollection([RawFencedCodeBlockLexer(
            re.compile(r"(?P<language>text)$\n", re.MULTILINE), {"language": "language"})])

    def __call__(self, document):
        for region in self.lexers(document):
            source = document.text[region.start:region.end]
            m = RUN_OUTPUT.search(source)
            if m is None:
                continue
            line = source[m.start():].split("\n", 1)[0]
            message = (f"this text block shows a run's output ({line[:60]!r}), which is never "
                       f"compared: write it as a console block under its command ($ python "
                       f"tools/...) with <!-- output: excerpt -->, or put <!-- skip: next "
                       f"\"why it cannot run\" --> above it")
            yield Region(region.start, region.end, message, _fail_with_parsed)


def parsers() -> list:
    return [
        ReasonedSkipParser(),
        OutputOptionsParser(),
        ShownOutputParser(),
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
    defines classes or functions (a module, which a later block imports); a block headed with a
    file of the repository must show that file as it is. A block assigning
    `_base_` is a config; one made only of top-level config keys is a config fragment, checked
    on top of configs/digits_mlp.py. Anything else is executed."""
    source = str(example.parsed)
    first = source.split("\n", 1)[0]
    header = _FILE_HEADER.fullmatch(first.split("  ")[0].strip())
    tree = ast.parse(source)
    if header:
        path = _sandbox_path(example, header.group(1))
        shipped = REPO / header.group(1)
        if shipped.exists():  # the page shows a file of the repo: it must be that file
            text = shipped.read_text().strip()
            body = source.split("\n", 1)[1] if not text.startswith(first) else source
            if body.strip() != text:
                raise AssertionError(f"the block differs from {header.group(1)}: show the file "
                                     f"as it is (or name the example another file)")
            return
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
        if not isinstance(node, ast.Assign) or not _config_value(node.value):
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


def _config_value(node: ast.AST) -> bool:
    """Whether an expression is config data: literals, containers and dict(...) calls."""
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    return all(isinstance(c.func, ast.Name) and c.func.id == "dict" for c in calls)


def _check_config(path: str) -> None:
    """Load the config, refuse unknown top-level keys, import its custom_imports and check that
    every `type=` class name is registered or importable."""
    from libai.config import Config
    from libai.runner.build import TOP_LEVEL_KEYS, validate_top_level
    from libai.runner.imports import import_custom_modules

    cfg = Config.fromfile(path)
    for key in cfg:  # a base without a model is fine: only unknown keys are refused
        if key not in TOP_LEVEL_KEYS and not str(key).startswith("_"):
            validate_top_level(cfg)
    import_custom_modules(cfg.get("custom_imports"), path)
    for where, name in _type_names(cfg.to_dict(), ""):
        if (name[:1].islower() and "." not in name) or where.count(".") > 1:
            continue  # a mode (clip_grad's type='norm'), or a part's own part (an Optuna pruner)
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
        _check_config(str(path))
