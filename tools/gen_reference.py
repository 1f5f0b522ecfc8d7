"""Write docs/reference.md: every flag of every tool and every top-level config key.

    python tools/gen_reference.py            # rewrite docs/reference.md
    python tools/gen_reference.py --check    # exit 1 if docs/reference.md is stale

The flags come from each tool's own argparse parser (taken as the tool builds it, without running
the tool); the config keys from the runner's key table, ``libai.runner.build.TOP_LEVEL_KEYS``,
with their defaults from ``TOP_LEVEL_DEFAULTS``. tests/docs/test_reference.py fails when the
committed page differs from what this script writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from libai.cli import reference
from libai.cli.reference import subparsers, tool_parser  # noqa: F401

TOOLS = Path(__file__).resolve().parent
PAGE = TOOLS.parent / "docs" / "reference.md"


def tool_paths() -> list[Path]:
    return reference.tool_paths(TOOLS)


def render() -> str:
    return reference.render(TOOLS)


def main(argv: list[str] | None = None) -> int:
    return reference.main(argv, TOOLS, PAGE)


if __name__ == "__main__":
    sys.exit(main())
