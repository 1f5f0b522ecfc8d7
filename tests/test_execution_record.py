"""Declared, not guessed (STYLE.md 23, issue 36): what mode a run is in (pipeline, compiled,
sharded, DDP) is decided once, where the model is prepared (libai/runner/distribute.py builds
the :class:`~libai.model.execution.Execution` record), and read from that record everywhere else.
This scan fails when an ``isinstance`` on a wrapper or mode class, a ``hasattr`` / ``getattr`` /
attribute read of a wrapper's private member, or a class-name comparison comes back outside the
files that build the record. Device: none (reads the source)."""

import ast
from pathlib import Path

import libai

ROOT = Path(libai.__file__).resolve().parent.parent
# the files that build the record or the forms it describes, and why each may look
ALLOWED = {
    "libai/runner/distribute.py": "prepares the model and builds the record",
    "libai/model/execution.py": "the record, and unwrap_model for models outside a run",
    "libai/parallel/": "builds the parallel forms (pipeline stages, FSDP, DDP) it describes",
    "libai/model/graph/options.py": "reads the compile switch of the config, where an "
                                    "optim_wrapper (a dict or built) may name GraphOptimWrapper",
    "libai/checkpoint/model_state.py": "the checkpoint format: the one place that strips the "
                                       "module. and _orig_mod. prefixes of any module handed to "
                                       "it (STYLE.md 6), a run's or not",
}
# the classes a run's model or optimizer wrapper may be, by name
MODE_CLASSES = {"PipelineModule", "StageModule", "GraphModule", "GraphOptimWrapper",
                "DistributedDataParallel", "FSDPModule", "OptimizedModule", "Absent"}
# wrapper members whose presence gives the mode away (looked for with hasattr / getattr)
MODE_ATTRIBUTES = {"_orig_mod", "_libai_pipeline_stages", "PIPELINE_ATTR", "compiles_step",
                   "describe_step", "clip_norm_fn", "bind_model"}
# private members of a wrapper, read or written from outside it
PRIVATE_MEMBERS = {"_orig_mod", "_libai_pipeline_stages", "compiles_step", "clip_norm_fn"}


def _names(node: ast.AST) -> set[str]:
    """The class names an isinstance's second argument names (a name, a dotted one, a tuple)."""
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    if isinstance(node, ast.BinOp):  # A | B
        return _names(node.left) | _names(node.right)
    if isinstance(node, ast.Attribute):
        return {node.attr}
    return {node.id} if isinstance(node, ast.Name) else set()


def _guesses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = node.args
            if node.func.id in ("isinstance", "issubclass") and len(args) == 2 \
                    and _names(args[1]) & MODE_CLASSES:
                found.append((node.lineno, ast.unparse(node)))
            elif node.func.id in ("hasattr", "getattr", "setattr") and len(args) >= 2 and (
                    (isinstance(args[1], ast.Constant) and args[1].value in MODE_ATTRIBUTES)
                    or (isinstance(args[1], ast.Name) and args[1].id in MODE_ATTRIBUTES)):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Attribute) and node.attr in PRIVATE_MEMBERS and not (
                isinstance(node.value, ast.Name) and node.value.id == "self"):
            found.append((node.lineno, ast.unparse(node)))  # a wrapper's member, read or written
        elif isinstance(node, ast.Compare) and all(
                isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops) and any(
                isinstance(c, ast.Constant) and c.value in MODE_CLASSES
                for c in [node.left, *node.comparators]):
            found.append((node.lineno, ast.unparse(node)))
    return found


def _scanned() -> list[Path]:
    files = sorted((ROOT / "libai").rglob("*.py"))
    return [p for p in files
            if not any(p.relative_to(ROOT).as_posix().startswith(a) for a in ALLOWED)]


def test_no_mode_is_guessed_outside_the_record():
    guesses = [f"{path.relative_to(ROOT)}:{line}: {text}" for path in _scanned()
               for line, text in _guesses(ast.parse(path.read_text()))]
    assert not guesses, (
        "these lines find out what the model or the optimizer wrapper is by type or attribute; "
        "read it from the execution record instead (runner.execution, libai/model/execution.py), "
        "or add the field the record misses:\n" + "\n".join(guesses))


def test_the_scan_sees_what_it_must_see():
    planted = ast.parse(
        "isinstance(m, PipelineModule)\nisinstance(m, (nn.Linear, nn.parallel.DistributedDataParallel))\n"
        "isinstance(m, GraphModule | nn.Linear)\n"
        "hasattr(m, '_orig_mod')\nm.model._orig_mod\ntype(m).__name__ == 'Absent'\n"
        "getattr(m, PIPELINE_ATTR, None)\nw.clip_norm_fn = f\n")
    assert sorted({line for line, _ in _guesses(planted)}) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert not _guesses(ast.parse("isinstance(p, DTensor)\nisinstance(x, dict)\nm.module\n"
                                  "self._orig_mod\n'DistributedDataParallel' in reason\n"))
