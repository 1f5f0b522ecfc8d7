"""Imports point down only (docs/design.md): a module may import its own layer or lower ones."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "libai"

LAYER = {
    "utils": 0,
    "version": 0,
    "config": 1,
    "registry": 1,
    "model": 2,
    "optim": 2,
    "evaluator": 2,
    "checkpoint": 2,
    "data": 2,
    "parallel": 2,
    "testing": 2,
    "visualization": 2,
    "hooks": 3,
    "loops": 3,
    "runner": 4,
    "analysis": 5,  # looking at runs and data: logs, browse, summary
    "tuning": 5,  # lr_find, sweeps
    "cli": 6,  # the `libai` command: parsers around the packages above
}
# Same-layer pairs that must not import each other either.
FORBIDDEN = {("config", "registry"), ("registry", "config"), ("hooks", "loops"), ("loops", "hooks")}


def _imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "libai" and len(parts) > 1 else None


FILES = [p for p in ROOT.rglob("*.py") if p.relative_to(ROOT).parts[0] in LAYER]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path):
    own = path.relative_to(ROOT).parts[0].removesuffix(".py")
    for module in _imports(path):
        target = _package(module)
        if target is None or target == own or target not in LAYER:
            continue
        assert LAYER[target] <= LAYER[own] and (own, target) not in FORBIDDEN, (
            f"libai/{path.relative_to(ROOT)} (layer {LAYER[own]}, {own}) imports {module} "
            f"(layer {LAYER[target]}): imports must point down; see docs/design.md"
        )


def test_every_package_has_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(LAYER), f"give these packages a layer: {packages - set(LAYER)}"
