"""A model's summary: parameters per top-level module, the total and its size, as a table.

::

    from libai.model.summary import format_summary, summarize_model

    summary = summarize_model(model)            # rows + totals, no forward pass
    print(format_summary(summary))              # a rich table on a terminal, plain text otherwise

``summarize_model`` only walks the module tree (microseconds to milliseconds, no forward). The
optional columns come from a forward/backward pass the caller already runs:
``output_shapes`` (:func:`record_output_shapes`, forward hooks on the rows' modules) and
``flops`` (a ``torch.utils.flop_counter.FlopCounterMode``'s per-module counts,
:func:`flops_by_row`). ``tools/model_summary.py`` fills both; the ThroughputHook logs the
parameter table at the start of training and the FLOPs of the first step as a line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .execution import unwrap_model

__all__ = [
    "ModelSummary",
    "SummaryRow",
    "flops_by_row",
    "format_count",
    "format_flops",
    "format_summary",
    "record_output_shapes",
    "summarize_model",
]


@dataclass
class SummaryRow:
    """One module of the summary.

    ``params`` counts the parameters first met in this row (a parameter shared with an earlier
    row, such as tied embeddings, is counted there once and appears here in ``shared``), so the
    rows add up to the model's total.
    """

    name: str
    type: str
    params: int
    trainable: int
    shared: int = 0
    output_shape: str | None = None
    flops: int | None = None


@dataclass
class ModelSummary:
    """The rows and totals of :func:`summarize_model`."""

    name: str
    rows: list[SummaryRow]
    total_params: int
    trainable_params: int
    size_mib: float  # parameters and buffers
    param_mib_by_dtype: dict[str, float] = field(default_factory=dict)
    buffer_mib: float = 0.0
    total_flops: int | None = None  # of the rows' FLOPs column, when counted

    @property
    def frozen_params(self) -> int:
        return self.total_params - self.trainable_params


def _rows_root(model: nn.Module) -> tuple[str, nn.Module]:
    """Where the rows start: the model, or down a chain of single children (``DigitsMLP.net``:
    its layers are the interesting rows), as long as nothing on the way holds parameters."""
    prefix, module = "", model
    while True:
        children = list(module.named_children())
        if len(children) != 1 or any(True for _ in module.parameters(recurse=False)):
            return prefix, module
        name, child = children[0]
        if not list(child.named_children()):  # a leaf: keep it as the one row
            return prefix, module
        prefix, module = f"{prefix}{name}.", child


def _row_modules(model: nn.Module, depth: int) -> list[tuple[str, nn.Module]]:
    prefix, root = _rows_root(model)
    rows = [(f"{prefix}{n}", m) for n, m in root.named_children()]
    for _ in range(depth - 1):
        expanded = []
        for name, module in rows:
            children = list(module.named_children())
            expanded += [(f"{name}.{n}", m) for n, m in children] if children else [(name, module)]
        rows = expanded
    return rows


def summarize_model(
    model: nn.Module,
    depth: int = 1,
    output_shapes: Mapping[str, str] | None = None,
    flops: Mapping[str, int] | None = None,
    total_flops: int | None = None,
) -> ModelSummary:
    """Rows for the model's top-level modules and the totals.

    Args:
        model: The model (wrappers such as DDP or ``torch.compile`` are looked through).
        depth: 1 lists the top-level children (below a chain of single children such as
            ``DigitsMLP.net``), 2 also their children, and so on. Defaults to 1.
        output_shapes: ``{row name: shape text}`` from :func:`record_output_shapes`.
        flops: ``{row name: FLOPs}`` from :func:`flops_by_row`: the column "forward FLOPs".
        total_flops: The total of that column (the model's forward), when counted.

    Returns:
        A :class:`ModelSummary`; its rows' ``params`` add up to ``total_params``, the number of
        distinct parameter elements (``sum(p.numel() for p in model.parameters())``). Parameters
        held by the model itself rather than a child are one row named ``(own)``.
    """
    model = unwrap_model(model)
    seen: set[int] = set()
    rows: list[SummaryRow] = []
    own = list(model.parameters(recurse=False))
    entries: list[tuple[str, nn.Module | None, list[nn.Parameter]]] = []
    if own:
        entries.append(("(own)", None, own))
    entries += [(name, m, list(m.parameters())) for name, m in _row_modules(model, depth)]
    for name, module, params in entries:
        count = trainable = shared = 0
        for p in params:
            if id(p) in seen:
                shared += p.numel()
                continue
            seen.add(id(p))
            count += p.numel()
            trainable += p.numel() if p.requires_grad else 0
        rows.append(SummaryRow(
            name=name,
            type=type(module).__name__ if module is not None else "Parameter",
            params=count,
            trainable=trainable,
            shared=shared,
            output_shape=(output_shapes or {}).get(name),
            flops=(flops or {}).get(name),
        ))
    total = trainable = 0
    by_dtype: dict[str, int] = {}
    for p in model.parameters():  # distinct tensors: a tied weight once
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
        key = str(p.dtype).replace("torch.", "")
        by_dtype[key] = by_dtype.get(key, 0) + p.numel() * p.element_size()
    buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
    return ModelSummary(
        name=type(model).__name__,
        rows=rows,
        total_params=total,
        trainable_params=trainable,
        size_mib=(sum(by_dtype.values()) + buffer_bytes) / 2**20,
        param_mib_by_dtype={k: v / 2**20 for k, v in by_dtype.items()},
        buffer_mib=buffer_bytes / 2**20,
        total_flops=total_flops,
    )


# ------------------------------------------------------------------- optional columns
def _shape_text(value: Any) -> str | None:
    if isinstance(value, torch.Tensor):
        return "x".join(str(s) for s in value.shape) if value.ndim else "scalar"
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        parts = [t for t in (_shape_text(v) for v in value) if t is not None]
        if not parts:
            return None
        return ", ".join(parts[:2]) + (", ..." if len(parts) > 2 else "")
    return None


@contextlib.contextmanager
def record_output_shapes(model: nn.Module, depth: int = 1) -> Iterator[dict[str, str]]:
    """Within the block, record the output shape of each row's module (its first call).

    Forward hooks on the rows' modules, removed on exit; the dict fills as the model runs.
    Shapes are written ``16x64``; a tuple or dict output lists its first two tensors.
    """
    shapes: dict[str, str] = {}
    handles = []
    for name, module in _row_modules(unwrap_model(model), depth):
        def hook(mod: nn.Module, args: Any, out: Any, name: str = name) -> None:
            if name not in shapes:
                text = _shape_text(out)
                if text is not None:
                    shapes[name] = text
        handles.append(module.register_forward_hook(hook))
    try:
        yield shapes
    finally:
        for handle in handles:
            handle.remove()


def flops_by_row(model: nn.Module, counts: Mapping[str, Mapping[Any, int]],
                 depth: int = 1) -> dict[str, int]:
    """Per row, the FLOPs of ``FlopCounterMode.get_flop_counts()``.

    Give it the counts taken at the end of the forward: the counter attributes forward
    operations to the running modules exactly, backward ones only approximately (autograd runs
    them in its own order, so a module's backward may be charged to its neighbour). The counter
    names modules ``<ModelClass>.<path>`` as they run; a row whose module never
    runs itself (a ``ModuleList``) gets the FLOPs of its descendants that ran under their path,
    and is left out when there are none.
    """
    model = unwrap_model(model)
    root = type(model).__name__
    totals = {name: sum(ops.values()) for name, ops in counts.items()}
    out: dict[str, int] = {}
    for name, _ in _row_modules(model, depth):
        key = f"{root}.{name}"
        if key in totals:
            out[name] = totals[key]
            continue
        below = sorted(k for k in totals if k.startswith(key + "."))
        outer = [k for k in below if not any(k.startswith(o + ".") for o in below if o != k)]
        if outer:
            out[name] = sum(totals[k] for k in outer)
    return out


# --------------------------------------------------------------------------- format
def format_count(n: float) -> str:
    """``1234567`` -> ``1.23 M``; below a thousand as is."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f}" if float(n).is_integer() else f"{n:.3g}"


def format_flops(n: float | None) -> str:
    """``2.5e9`` -> ``2.5 GFLOP``; None -> ``unknown``."""
    if n is None:
        return "unknown"
    text = format_count(n)
    return f"{text}FLOP" if text[-1].isalpha() else f"{text} FLOP"


def _cells(summary: ModelSummary) -> tuple[list[str], list[list[str]], list[str]]:
    shapes = any(r.output_shape for r in summary.rows)
    flops = any(r.flops is not None for r in summary.rows)
    header = ["module", "type", "parameters", "trainable"]
    header += ["output shape"] * shapes + ["forward FLOPs"] * flops
    body = []
    for r in summary.rows:
        params = f"{r.params:,}" + (f" (+{r.shared:,} shared)" if r.shared else "")
        row = [r.name, r.type, params, f"{r.trainable:,}"]
        row += [r.output_shape or "-"] * shapes
        row += [format_count(r.flops) if r.flops is not None else "-"] * flops
        body.append(row)
    total = ["total", "", f"{summary.total_params:,}", f"{summary.trainable_params:,}"]
    total += [""] * shapes
    total += [format_count(summary.total_flops) if summary.total_flops else ""] * flops
    return header, body, total


def _footer(summary: ModelSummary) -> str:
    by_dtype = ", ".join(f"{k} {v:.2f} MiB" for k, v in summary.param_mib_by_dtype.items())
    text = (f"{summary.name}: {format_count(summary.total_params)} parameters "
            f"({format_count(summary.trainable_params)} trainable), {summary.size_mib:.2f} MiB")
    details = [by_dtype] if by_dtype else []
    if summary.buffer_mib:
        details.append(f"buffers {summary.buffer_mib:.2f} MiB")
    return text + (f" ({'; '.join(details)})" if details else "")


def format_summary(summary: ModelSummary, use_rich: bool | None = None, width: int = 100) -> str:
    """The summary as text: a table of the rows with a total row, then one line of sizes.

    Args:
        summary: From :func:`summarize_model`.
        use_rich: Draw the table with rich (box lines). Defaults to None: when stdout is a
            terminal, where rich is imported already for the log; plain aligned columns
            otherwise (log files, CI), which costs no import.
        width: Width of the rich table. Defaults to 100.
    """
    header, body, total = _cells(summary)
    numeric = {"parameters", "trainable", "forward FLOPs"}
    if use_rich is None:
        from libai.utils.logging import stdout_is_terminal

        use_rich = stdout_is_terminal()
    if use_rich:
        import io

        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"Model summary: {summary.name}", title_justify="left")
        for name in header:
            table.add_column(name, justify="right" if name in numeric else "left")
        for row in body:
            table.add_row(*row)
        table.add_section()
        table.add_row(*total)
        console = Console(file=io.StringIO(), width=width, color_system=None,
                          force_terminal=False, legacy_windows=False)
        console.print(table)
        drawn = [text.rstrip() for text in console.file.getvalue().rstrip().splitlines()]
        return "\n".join([*drawn, _footer(summary)])
    rows = [header, *body, total]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if h in numeric else c.ljust(w)
                         for c, w, h in zip(cells, widths, header)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [f"Model summary: {summary.name}", line(header), rule, *map(line, body), rule,
           line(total), _footer(summary)]
    return "\n".join(out)
