"""Imports point down only (docs/design.md): a module may import its own package or a lower
layer, never another package of its own layer."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "libai"

LAYER = {
    "utils": 0,
    "version": 0,
    "config": 1,
    "registry": 1,
    # what a model, a batch, a metric and a log line are: none imports another
    "model": 2,
    "data": 2,
    "evaluator": 2,
    "visualization": 2,
    # what is done with a model: each reads libai.model (its blocks, its execution record),
    # none imports another (the optimizer wrapper learns how norms combine from the record)
    "parallel": 3,
    "checkpoint": 3,
    "optim": 3,
    "testing": 3,
    "hooks": 4,
    "loops": 4,
    "runner": 5,
    "analysis": 6,  # looking at runs and data: logs, browse, summary
    "tuning": 6,  # lr_find, sweeps
    "cli": 7,  # the `libai` command: parsers around the packages above
}


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
        assert LAYER[target] < LAYER[own], (
            f"libai/{path.relative_to(ROOT)} (layer {LAYER[own]}, {own}) imports {module} "
            f"(layer {LAYER[target]}): imports must point down, never sideways; see docs/design.md"
        )


def test_every_package_has_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(LAYER), f"give these packages a layer: {packages - set(LAYER)}"


def _module_of(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """``{module: the libai modules it imports}``, relative and in-function imports included
    (``from .x import y`` names ``pkg.x``, or ``pkg.x.y`` when that is a module)."""
    modules = {_module_of(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[:len(package) - node.level + 1] + [base] * bool(base))
                found = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            for target in found:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_packages_or_files():
    """Not even inside a layer (issue 36: optim and parallel imported each other, and so did
    parallel/pipeline.py and pipeline_module.py); a package's ``__init__`` re-exports, so it is
    left out of the file graph."""
    graph = _import_graph()
    packages: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            a, b = (_package(m) or m for m in (source, target))
            if a != b:
                packages.setdefault(a, set()).add(b)
    files = {m: {t for t in ts if not t.endswith("__init__") and t in graph and
                 not (ROOT.parent / (t.replace(".", "/") + "/__init__.py")).exists()}
             for m, ts in graph.items()
             if not (ROOT.parent / (m.replace(".", "/") + "/__init__.py")).exists()}
    assert not _cycles(packages), f"packages that import each other: {_cycles(packages)}"
    assert not _cycles(files), f"files that import each other: {_cycles(files)}"
