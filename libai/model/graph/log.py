"""What torch reports about graph mode: graph breaks and recompiles, with their reasons.

Read from torch's own logging (``torch._logging.set_logs(graph_breaks=True, recompiles=True)``)
by one handler for the process; :class:`~libai.model.graph.GraphMode` counts from where it started
and writes the report. Nothing is printed unless the user asked with ``TORCH_LOGS``.
"""

from __future__ import annotations

import logging
import os

import torch

__all__ = ["COMPILE_LOG", "where_kind"]


class _CompileLog(logging.Handler):
    """Collects the graph-break and recompile records of torch's logging, without printing them
    (unless the user asked for them with ``TORCH_LOGS``)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.graph_breaks: list[str] = []
        self.recompiles: list[str] = []
        self.quiet = _QuietFilter()

    def emit(self, record: logging.LogRecord) -> None:
        name = record.name
        if name.endswith("__graph_breaks"):
            self.graph_breaks.append(_graph_break_reason(record.getMessage()))
        elif name.endswith("__recompiles"):
            self.recompiles.append(_recompile_reason(record.getMessage()))
        elif record.levelno >= logging.WARNING and "recompile_limit" in record.getMessage():
            self.recompiles.append(record.getMessage().splitlines()[0])

    def install(self) -> None:
        # torch's logging sets propagate=False on its component loggers (torch._dynamo, ...):
        # the handler goes on the one whose children log graph breaks and recompiles
        for name in ("torch", "torch._dynamo"):
            logger = logging.getLogger(name)
            if self in logger.handlers:
                continue
            if "TORCH_LOGS" not in os.environ:
                torch._logging.set_logs(graph_breaks=True, recompiles=True)
                for handler in logger.handlers:
                    handler.addFilter(self.quiet)
            logger.addHandler(self)


class _QuietFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Profiler record function"):
            return False  # torch.optim's profiler labels, dropped inside the compiled update
        return not record.name.endswith(("__graph_breaks", "__recompiles"))


def _graph_break_reason(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    where = lines[0].removeprefix("Graph break (user stack suppressed due to duplicate graph break)")
    where = where.removeprefix("Graph break").strip()
    reason = next((line for line in lines if line.startswith("Explanation:")), "")
    reason = reason or next((line for line in lines if "Reason" in line), lines[-1] if lines else "")
    return f"{where}: {reason.removeprefix('Explanation:').strip()}"


def _recompile_reason(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    failures = [line.removeprefix("- ") for line in lines if line.startswith("- ")]
    return "; ".join(failures) or (lines[0] if lines else message)


COMPILE_LOG = _CompileLog()  # one per process: torch has one logging tree


def where_kind(reason: str) -> str:
    """Whose graph break this is: torch.optim's, DDP's or the model's."""
    if "torch/optim/" in reason:
        return "(torch.optim's own, by design)"
    if "torch/nn/parallel/" in reason or "DistributedDataParallel" in reason:
        return "(DDP's own: its forward runs eager around the compiled model)"
    return "(in the model)"
