"""Graph mode on the model side: the compiled forward, a way back to eager, what torch reports.

:class:`GraphModule` wraps a model (or its DDP wrapper) in ``torch.compile`` and keeps the eager
module at hand:

- **Fallback.** When compiling fails, the same call runs eager. If eager fails too, the model
  has a bug and eager's error is raised; otherwise ``on_failure="eager"`` logs one warning and the
  run stays eager, ``on_failure="raise"`` stops with :class:`GraphModeError`.
- **Reference steps.** For the first ``verify_steps`` training calls it also runs a copy of the
  model eagerly on the same batch and the same random numbers; the optim wrapper compares loss
  and gradient norm after backward (see :class:`libai.optim.GraphOptimWrapper`).
- **Report.** Graph breaks and recompiles, with the reasons torch gives, are read from torch's
  own logging (``torch._logging.set_logs(graph_breaks=True, recompiles=True)``) and summarised;
  a recompile storm (shapes changing every batch) is reported once with the fix.

Its state dict is the model's with an ``_orig_mod.`` prefix, as ``torch.compile``'s own wrapper:
libai's checkpoints strip it, so eager and graph runs save the same keys.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import time
from typing import Any

import torch
from torch import nn

from libai.utils.errors import ConfigError, LibaiError
from libai.utils.suggest import did_you_mean

__all__ = ["GraphModule", "GraphModeError", "compile_options"]

_logger = logging.getLogger("libai")

COMPILE_KEYS = tuple(p for p in inspect.signature(torch.compile).parameters if p != "model")
_STORM = 3  # training recompiles after the first step that make a storm


class GraphModeError(LibaiError):
    """Graph mode could not compile the model, or its result differs from eager."""


def compile_options(cfg: dict | bool | None, exact_random: bool = True) -> dict[str, Any]:
    """Check ``optim_wrapper.compile`` and return the keyword arguments for ``torch.compile``.

    ``mode`` is turned into inductor ``options`` (``torch._inductor.list_mode_options``) so that
    ``exact_random`` (inductor's ``fallback_random``: random numbers drawn as eager draws them)
    can be added to any mode; torch.compile does not accept both ``mode`` and ``options``.

    Raises:
        ConfigError: an unknown key, with the closest valid one.
    """
    options = {} if cfg in (None, True) else cfg
    if not isinstance(options, dict):
        raise ConfigError(
            f"optim_wrapper.compile must be a dict of torch.compile arguments, e.g. "
            f"dict(mode='max-autotune', dynamic=False), got {cfg!r}."
        )
    options = dict(options)
    for key in options:
        if key not in COMPILE_KEYS:
            raise ConfigError(
                f"optim_wrapper.compile.{key} is not a torch.compile argument."
                f"{did_you_mean(str(key), COMPILE_KEYS)} Valid: {', '.join(COMPILE_KEYS)}."
            )
    backend = options.get("backend", "inductor")
    if backend == "inductor":
        mode = options.pop("mode", None)
        try:
            inductor = dict(torch._inductor.list_mode_options(mode)) if mode else {}
        except (KeyError, RuntimeError) as e:
            modes = [m for m in torch._inductor.list_mode_options() if m != "default"]
            raise ConfigError(
                f"optim_wrapper.compile.mode={mode!r} is not a torch.compile mode."
                f"{did_you_mean(str(mode), modes)} Valid: {', '.join(modes)}."
            ) from e
        if exact_random:
            inductor["fallback_random"] = True
        inductor.update(options.get("options") or {})
        if inductor:
            options["options"] = inductor
    return options


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


_LOG = _CompileLog()


def _is_compile_error(error: BaseException) -> bool:
    return isinstance(error, torch._dynamo.exc.TorchDynamoException)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    lines = [line for line in text if line.strip() and not line.startswith("Set TORCHDYNAMO")]
    return f"{type(error).__name__}: {' '.join(lines[:2])[:300]}"


class GraphModule(nn.Module):
    """``torch.compile(module)`` with an eager fallback, reference steps and a compile report.

    Args:
        module: The model, or its DDP wrapper.
        compile: ``torch.compile`` keyword arguments (see :func:`compile_options`).
        on_failure: "eager" (warn once and continue eager) or "raise". Defaults to "eager".
        blocks: Compile these modules' forwards one by one, and nothing else, instead of the
            whole model: the way of a sharded model (FSDP2, tensor parallel), whose hooks
            (all-gathers, reshards) then run eager between the compiled blocks. Blocks of one
            class share one compiled graph. The state dict keys do not change. Defaults to None.
    """

    def __init__(self, module: nn.Module, compile: dict | None = None, on_failure: str = "eager",
                 blocks: list[nn.Module] | None = None) -> None:
        super().__init__()
        if on_failure not in ("eager", "raise"):
            raise ConfigError(
                f"optim_wrapper.on_failure={on_failure!r} is not a policy."
                f"{did_you_mean(str(on_failure), ('eager', 'raise'))} Use 'eager' or 'raise'."
            )
        self._orig_mod = module
        self.on_failure = on_failure
        self.options = dict(compile or {})
        # each block's own forward attribute (activation checkpointing sets one), put back by
        # a fallback to eager
        self._eager_forwards = [(block, block.__dict__.get("forward")) for block in blocks or ()]
        if blocks:
            for block in blocks:
                block.forward = torch.compile(block.forward, **self.options)
            self.__dict__["_compiled"] = module
        else:
            self.__dict__["_compiled"] = torch.compile(module, **self.options)
        self.eager = False
        self.failure: str | None = None
        self.verify_steps = 0
        self.train_calls = 0
        self.training_recompiles = 0  # after the first training call
        self._phases: dict[int, str] = {}  # index in the recompile log -> "train" / "eval"
        self.compile_seconds: dict[str, float] = {}
        self._reference: tuple[nn.Module, Any] | None = None
        self._replay: tuple[tuple, dict, torch.Tensor] | None = None
        self._log = _LOG
        self._log.install()
        self._breaks_at_start = len(self._log.graph_breaks)
        self._recompiles_at_start = len(self._log.recompiles)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self._orig_mod, name)  # e.g. DDP's no_sync

    # --------------------------------------------------------------------------- forward
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.eager:
            return self._orig_mod(*args, **kwargs)
        training = self.training and torch.is_grad_enabled()
        if training:
            self.train_calls += 1
            if self.train_calls <= self.verify_steps:
                self._reference = self._run_reference(args, kwargs)
            if self.train_calls == 1:  # kept until the first backward has compiled
                self._replay = (args, kwargs, torch.get_rng_state())
        phase = "train" if training else "eval"
        first = phase not in self.compile_seconds
        start = time.perf_counter()
        recompiles = len(self._log.recompiles)
        try:
            out = self._compiled(*args, **kwargs)
        except Exception as e:
            if not _is_compile_error(e):
                raise
            return self._fall_back(e, args, kwargs)
        if first:
            self.compile_seconds[phase] = time.perf_counter() - start
        if len(self._log.recompiles) > recompiles:
            for index in range(recompiles, len(self._log.recompiles)):
                self._phases[index] = phase
            if training and not first:
                self._note_training_recompile()
        return out

    def _fall_back(self, error: BaseException, args: tuple, kwargs: dict) -> Any:
        """Run eagerly; keep eager on (or raise, per ``on_failure``) only if eager works."""
        self._uncompile_blocks()
        out = self._orig_mod(*args, **kwargs)  # a model bug raises its own, eager error here
        self.failed(error, "the forward")
        return out

    def failed(self, error: BaseException, where: str) -> None:
        """Compiling ``where`` failed: raise or go eager for the rest of the run."""
        cause = _first_line(error)
        if self.on_failure == "raise":
            raise GraphModeError(
                f"Graph mode: torch.compile failed on {where} of {type(self.unwrapped).__name__}: "
                f"{cause}. Set optim_wrapper.on_failure='eager' to train eager instead, or run "
                f"without graph mode."
            ) from error
        self.eager = True
        self._uncompile_blocks()
        self.failure = f"{where}: {cause}"
        self._reference = self._replay = None
        _logger.warning(
            f"Graph mode: torch.compile failed on {where} of {type(self.unwrapped).__name__} "
            f"({cause}); training continues in eager mode. Set optim_wrapper.on_failure='raise' "
            f"to stop instead.")

    def _uncompile_blocks(self) -> None:
        for block, forward in self._eager_forwards:
            if forward is None:
                block.__dict__.pop("forward", None)  # the class's forward again
            else:
                block.forward = forward

    @property
    def unwrapped(self) -> nn.Module:
        module = self._orig_mod
        return module.module if isinstance(module, nn.parallel.DistributedDataParallel) else module

    # ------------------------------------------------------------------ reference steps
    def _run_reference(self, args: tuple, kwargs: dict) -> tuple[nn.Module, Any]:
        """An eager copy of the model (with its gradients so far), run on the same batch and the
        same random numbers as the compiled call that follows."""
        model = self.unwrapped
        reference = copy.deepcopy(model)
        for p, q in zip(model.parameters(), reference.parameters()):
            q.grad = None if p.grad is None else p.grad.detach().clone()
        device = next(model.parameters(), torch.empty(0)).device
        devices = [device.index or 0] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            out = reference(*args, **kwargs)
        return reference, out

    def take_reference(self) -> tuple[nn.Module, Any] | None:
        """The eager copy and its outputs for the current step (once), or None."""
        reference, self._reference = self._reference, None
        return reference

    def replay_eager(self) -> Any:
        """The first training call again, eager, with the same random numbers (for a backward
        that failed to compile). Only available until the first step has completed."""
        if self._replay is None:
            raise RuntimeError("GraphModule.replay_eager: no call to replay")
        args, kwargs, rng = self._replay
        self._replay = None
        torch.set_rng_state(rng)
        return self._orig_mod(*args, **kwargs)

    def first_step_done(self) -> None:
        self._replay = None

    # -------------------------------------------------------------------------- report
    def _note_training_recompile(self) -> None:
        self.training_recompiles += 1
        if self.training_recompiles == _STORM:
            _logger.warning(
                f"Graph mode: the training graph was recompiled {self.training_recompiles} times "
                f"after the first step (last reason: {self._log.recompiles[-1]}). Input shapes change "
                f"between batches: pad them to a fixed length, set "
                f"optim_wrapper.compile=dict(dynamic=True), or bucket the lengths.")

    def graph_breaks(self) -> list[str]:
        return self._log.graph_breaks[self._breaks_at_start:]

    def recompiles(self) -> list[str]:
        start = self._recompiles_at_start
        return [f"({self._phases.get(i, 'update')}) {reason}"
                for i, reason in enumerate(self._log.recompiles[start:], start)]

    def report(self, final: bool = False) -> str:
        """One paragraph: compile time, graph breaks and recompiles with their reasons."""
        if self.eager:
            return f"Graph mode: eager since {self.failure or 'the parity check failed'}."
        parts = [f"{phase} {seconds:.1f} s" for phase, seconds in self.compile_seconds.items()]
        breaks, recompiles = self.graph_breaks(), self.recompiles()
        blocks = len(self._eager_forwards)
        lines = [
            f"Graph mode{' (end of run)' if final else ''}"
            f"{f', {blocks} blocks compiled one by one' if blocks else ''}: first call per graph (compile) "
            f"{', '.join(parts) or 'none yet'}; {len(breaks)} graph break(s), "
            f"{len(recompiles)} recompile(s)."
        ]
        lines += [f"  graph break {_where_kind(b)}: {b}" for b in dict.fromkeys(breaks)]
        lines += [f"  recompile: {r}" for r in dict.fromkeys(recompiles)]
        return "\n".join(lines)


def _where_kind(reason: str) -> str:
    if "torch/optim/" in reason:
        return "(torch.optim's own, by design)"
    if "torch/nn/parallel/" in reason or "DistributedDataParallel" in reason:
        return "(DDP's own: its forward runs eager around the compiled model)"
    return "(in the model)"
