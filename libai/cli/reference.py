"""docs/reference.md from the code: every flag of every tool (each tool's own argparse parser,
taken as the tool builds it, without running it) and every top-level config key
(``libai.runner.build.TOP_LEVEL_KEYS`` with ``TOP_LEVEL_DEFAULTS``).

``python tools/gen_reference.py`` writes the page, ``--check`` exits 1 when it is stale;
tests/docs/test_reference.py fails when the committed page differs from :func:`render`.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path

__all__ = ["main", "render", "subparsers", "tool_parser", "tool_paths"]


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def tool_parser(path: Path) -> argparse.ArgumentParser:
    """The parser a tool builds, caught at its first ``parse_args``: nothing else runs."""
    namespace = runpy.run_path(str(path), run_name="libai_tool_reference")
    entry = namespace.get("parse_args") or namespace["main"]

    def catch(self, *args, **kwargs):
        raise _Parsed(self)

    saved = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = catch
    try:
        entry([])
    except _Parsed as e:
        parser = e.parser
    else:
        raise RuntimeError(f"{path.name} returned without parsing its arguments")
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = saved
    parser.prog = f"python tools/{path.name}"
    return parser


def tool_paths(tools: Path) -> list[Path]:
    """The tool scripts of the folder ``tools``, by name."""
    return sorted(p for p in Path(tools).glob("*.py") if not p.name.startswith("_"))


def subparsers(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """{command: (its help, its parser)}."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return {name: (helps.get(name, ""), sub) for name, sub in action.choices.items()}
    return {}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _flag_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or (action.dest.upper() if name else action.dest)
            nargs = {"?": f"[{metavar}]", "*": f"[{metavar} ...]", "+": f"{metavar} [...]"}
            name = f"{name} {nargs.get(action.nargs, metavar)}".strip()
        default = "" if action.default in (None, argparse.SUPPRESS, False) else repr(action.default)
        if action.choices and not isinstance(action.choices, dict):
            default += f" (one of {', '.join(map(str, action.choices))})"
        help_text = (action.help or "") % {"default": action.default, "prog": parser.prog} \
            if action.help and "%(" in action.help else action.help or ""
        rows.append(f"| `{_cell(name)}` | {_cell(default)} | {_cell(help_text)} |")
    return rows


def _tool_section(path: Path) -> list[str]:
    parser = tool_parser(path)
    out = [f"### tools/{path.name}", "", _cell(parser.description or ""), "",
           "```text", parser.format_usage().strip(), "```", ""]
    commands = [(name, help_text, sub) for name, (help_text, sub) in subparsers(parser).items()]
    for label, help_text, sub in [("", "", parser), *commands]:
        rows = _flag_rows(sub)
        if label:
            out += [f"`{label}`: {_cell(help_text or sub.description or '')}", ""]
        if rows:
            out += ["| argument | default | meaning |", "| --- | --- | --- |", *rows, ""]
    return out


def render(tools: Path) -> str:
    """The page's text for the tools in the folder ``tools``; the same on every machine (usage
    lines wrapped at 100 columns)."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return _render(tools)
    finally:
        if saved is None:
            os.environ.pop("COLUMNS")
        else:
            os.environ["COLUMNS"] = saved


def _render(tools: Path) -> str:
    from libai.runner.build import TOP_LEVEL_DEFAULTS, TOP_LEVEL_KEYS

    out = [
        "# Reference",
        "",
        "<!-- Written by tools/gen_reference.py; do not edit: run `python tools/gen_reference.py`. -->",
        "Generated from the code by `python tools/gen_reference.py` (the tools' argparse parsers "
        "and the runner's key table, `libai/runner/build.py`); `tests/docs/test_reference.py` "
        "fails when this page is stale.",
        "",
        "## Top-level config keys",
        "",
        "A config may hold these keys and no others (a helper variable starts with `_`).",
        "",
        "| key | default | meaning |",
        "| --- | --- | --- |",
    ]
    for key, meaning in TOP_LEVEL_KEYS.items():
        if key not in TOP_LEVEL_DEFAULTS:
            raise KeyError(f"top-level key {key!r} has no entry in libai/runner/build.py's "
                           f"TOP_LEVEL_DEFAULTS: add its default there")
        out.append(f"| `{key}` | {_cell(TOP_LEVEL_DEFAULTS[key])} | {_cell(meaning)} |")
    out += ["", "## Tools", ""]
    for path in tool_paths(tools):
        out += _tool_section(path)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None, tools: Path, page: Path) -> int:
    """``python tools/gen_reference.py [--check] [--out PAGE]`` for the tools in ``tools``,
    writing (or checking) ``page`` by default."""
    parser = argparse.ArgumentParser(description="Write docs/reference.md from the code.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if docs/reference.md is stale")
    parser.add_argument("--out", help="the page to write or check (default: docs/reference.md)")
    args = parser.parse_args(argv)
    text = render(tools)
    out = Path(args.out) if args.out else page
    if args.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is stale: run python tools/gen_reference.py", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    print(f"Wrote {out}")
    return 0
