"""GraphMode: the one owner of graph mode (see the package docstring)."""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as torch_dist
from torch import nn

from libai.utils.dist import is_sharded
from libai.utils.errors import TrainingError

from ..blocks import outermost
from ..contract import mean_over_data_parallel
from ..steps import parse_losses
from .log import COMPILE_LOG, where_kind
from .options import GraphModeError, check_policy

__all__ = ["GraphMode"]

_logger = logging.getLogger("libai")

_STORM = 3  # training recompiles after the first step that make a storm
# relative tolerance of the parity check: float32 kernels fused by inductor sum in another
# order (~1e-6 relative here); bf16/fp16 autocast rounds intermediates differently
_RTOL = {None: 1e-4, torch.bfloat16: 2e-2, torch.float16: 1e-2}


def _is_compile_error(error: BaseException) -> bool:
    return isinstance(error, torch._dynamo.exc.TorchDynamoException)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    lines = [line for line in text if line.strip() and not line.startswith("Set TORCHDYNAMO")]
    return f"{type(error).__name__}: {' '.join(lines[:2])[:300]}"


_COMPILING = {
    "train": "Graph mode: compiling the training step now. A cold compile usually takes 20-70 s on a "
             "2-core CPU with the default inductor backend (seconds with a warm compile cache, "
             "less on a machine with more cores); the log says when it is done.",
    "eval": "Graph mode: compiling the evaluation forward now (a new graph: seconds to a minute "
            "on a CPU).",
}

class GraphMode:
    """The one owner of graph mode: what is compiled, whether it still is, and why not.

    See the module docstring for what it does. :class:`GraphModule` makes one and compiles the
    model with it; :class:`libai.optim.GraphOptimWrapper` makes one for its update and uses the
    model's instead once bound. Both only call its methods and read its state.

    Args:
        compile: ``torch.compile`` keyword arguments (see :func:`compile_options`).
            Defaults to None.
        on_failure: "eager" (warn once and continue eager) or "raise". Defaults to "eager".
    """

    def __init__(self, compile: dict | None = None, on_failure: str = "eager") -> None:
        self.on_failure = check_policy("on_failure", on_failure)
        self.options = dict(compile or {})
        self.eager = False  # True once fallen back: a compile failure or a parity mismatch
        self.failure: str | None = None  # why
        # the parity check, set by check_parity
        self.verify_steps, self.verify_rtol, self.on_mismatch = 0, _RTOL[None], "raise"
        self.data_parallel: Any = None
        # the model, set by compile_model
        self.module: nn.Module | None = None
        self._unwrapped: nn.Module | None = None
        self._compiled: Any = None
        self._eager_forwards: list[tuple[nn.Module, Any]] = []
        self._block_forwards: list[Any] = []  # their compiled forwards, in the same order
        self.train_calls = 0
        self.training_recompiles = 0  # after the first training call
        self._phases: dict[int, str] = {}  # index in the recompile log -> "train" / "eval"
        self.compile_seconds: dict[str, float] = {}
        self._reference: tuple[nn.Module, Any] | None = None
        self._replay: tuple[tuple, dict, torch.Tensor] | None = None
        self._breaks_at_start = self._recompiles_at_start = 0
        # the update, compiled by run_update
        self._update: Callable[[], Any] | None = None
        self.update_compiled = False
        self.update_seconds = 0.0

    # ------------------------------------------------------------------------- compiling
    def compile_model(self, module: nn.Module, blocks: list[nn.Module] | None = None,
                      unwrapped: nn.Module | None = None) -> None:
        """Compile ``module`` (the model or its DDP wrapper, whose model is ``unwrapped``:
        defaults to ``module``), or only the forwards of ``blocks`` (regional compilation: the
        rest of the model, its loss and a sharded model's hooks run eager between them).

        Blocks of one class share one compiled graph: the compiled forwards are the same code,
        and dynamo keeps compiled code per code object, guarded on the block's type and tensor
        shapes, not on which block it is (``inline_inbuilt_nn_modules``, torch's default)."""
        self.module, self._unwrapped = module, unwrapped if unwrapped is not None else module
        blocks = outermost(blocks or [])
        # each block's own forward attribute (activation checkpointing sets one), put back by
        # a fallback to eager
        self._eager_forwards = [(block, block.__dict__.get("forward")) for block in blocks]
        self._block_forwards = [torch.compile(block.forward, **self.options) for block in blocks]
        if blocks:
            self._compile_blocks()
            self._compiled = module
        else:
            self._compiled = torch.compile(module, **self.options)
        COMPILE_LOG.install()
        self._breaks_at_start = len(COMPILE_LOG.graph_breaks)
        self._recompiles_at_start = len(COMPILE_LOG.recompiles)

    @property
    def unwrapped(self) -> nn.Module | None:
        """The model, without DDP (as :meth:`compile_model` was told)."""
        return self._unwrapped

    def forward(self, training: bool, args: tuple, kwargs: dict) -> Any:
        """Call the compiled model (eager after a fallback). ``training``: a call with grad in
        train mode, the ones the parity check and the replay watch."""
        if self.eager:
            return self.module(*args, **kwargs)
        if training:
            self.train_calls += 1
            if self.train_calls <= self.verify_steps:
                self._reference = self._run_reference(args, kwargs)
            if self.train_calls == 1:  # kept until the first backward has compiled
                self._replay = (args, kwargs, torch.get_rng_state())
        phase = "train" if training else "eval"
        first = phase not in self.compile_seconds
        if first:  # the first call compiles: say so before the wait, not only after it
            _logger.info(_COMPILING[phase])
        start = time.perf_counter()
        recompiles = len(COMPILE_LOG.recompiles)
        try:
            out = self._compiled(*args, **kwargs)
        except Exception as e:
            if not _is_compile_error(e):
                raise
            self._uncompile_blocks()
            out = self.module(*args, **kwargs)  # a model bug raises its own, eager error here
            self.failed(e, "the forward")
            return out
        if first:
            self.compile_seconds[phase] = time.perf_counter() - start
        if len(COMPILE_LOG.recompiles) > recompiles:
            for index in range(recompiles, len(COMPILE_LOG.recompiles)):
                self._phases[index] = phase
            if training and not first:
                self._note_training_recompile()
        return out

    def run_update(self, update: Callable[[], Any]) -> bool:
        """Run ``update`` (clipping and ``optimizer.step``) compiled. Returns False, having run
        nothing, when graph mode is eager or it has just fallen back: the caller runs it eager."""
        if self.eager:
            return False
        if self._update is None:
            self._update = torch.compile(update, **self.options)
        if self.update_compiled:
            self._update()
            return True
        start = time.perf_counter()
        try:
            self._update()
        except Exception as e:
            if not _is_compile_error(e):
                raise
            self.failed(e, "the optimizer update")
            return False
        self.update_compiled = True
        self.update_seconds = time.perf_counter() - start
        return True

    # -------------------------------------------------------------------------- fallback
    def failed(self, error: BaseException, where: str) -> None:
        """Compiling ``where`` failed: raise or go eager for the rest of the run."""
        cause = _first_line(error)
        of = "" if self.module is None else f" of {type(self.unwrapped).__name__}"
        if self.on_failure == "raise":
            raise GraphModeError(
                f"Graph mode: torch.compile failed on {where}{of}: {cause}. Set "
                f"compile.on_failure='eager' to train eager instead, or run without graph "
                f"mode.") from error
        self.eager = True
        self._uncompile_blocks()
        self.failure = f"{where}: {cause}"
        self._reference = self._replay = None
        _logger.warning(
            f"Graph mode: torch.compile failed on {where}{of} ({cause}); training continues in "
            f"eager mode. Set compile.on_failure='raise' to stop instead.")

    def _compile_blocks(self) -> None:
        for (block, _), compiled in zip(self._eager_forwards, self._block_forwards):
            block.forward = compiled

    def _uncompile_blocks(self) -> None:
        for block, forward in self._eager_forwards:
            if forward is None:
                block.__dict__.pop("forward", None)  # the class's forward again
            else:
                block.forward = forward

    def backward(self, loss: torch.Tensor, backward: Callable[[torch.Tensor], Any], *,
                 divisor: int = 1, step: int = 1, last_micro_batch: bool = True,
                 zero_grad: Callable[[], Any] | None = None) -> None:
        """``backward(loss)`` for a training step, with the fallback and the parity check.

        A backward that fails to compile (it compiles at its first call) is run again eager:
        the gradients are zeroed, the first forward replayed eagerly with the same random
        numbers, and its loss divided by ``divisor`` goes through ``backward``. On a reference
        step the eager copy's loss goes through ``backward`` too, and the two are compared.

        Args:
            loss: The compiled forward's loss, already divided by ``divisor``.
            backward: The wrapper's backward (it scales the loss under a GradScaler).
            divisor: The accumulation window's size. Defaults to 1.
            step: The micro-batch's number, counted from 1, for messages. Defaults to 1.
            last_micro_batch: This backward ends a window (DDP averages the gradients).
                Defaults to True.
            zero_grad: Resets the gradients before a replay. Defaults to None.
        """
        try:
            backward(loss)
        except Exception as e:
            if self.eager or self._replay is None:
                raise
            if zero_grad is not None:
                zero_grad()
            eager_loss = self._replay_loss()
            self.failed(e, "the backward")
            backward(eager_loss / divisor)
            return
        self._replay = None  # the first backward has compiled: no replay needed any more
        reference, self._reference = self._reference, None
        if reference is not None and not self.eager:
            self._check_parity(loss, *reference, backward, divisor, step, last_micro_batch)

    def _replay_loss(self) -> torch.Tensor:
        args, kwargs, rng = self._replay
        self._replay = None
        self._uncompile_blocks()  # the replay is eager, blocks included
        torch.set_rng_state(rng)
        outputs = self.module(*args, **kwargs)
        return outputs if isinstance(outputs, torch.Tensor) else parse_losses(outputs)[0]

    # --------------------------------------------------------------------- parity check
    def check_parity(self, verify_steps: int, rtol: float | None = None,
                     on_mismatch: str = "raise", dtype: torch.dtype | None = None,
                     data_parallel: Any = None) -> None:
        """Compare the first ``verify_steps`` training calls with an eager copy of the model.

        Args:
            verify_steps: How many training calls to check.
            rtol: Relative tolerance. Defaults to None: 1e-4 in float32, 2e-2 with bfloat16,
                1e-2 with float16 (``dtype``).
            on_mismatch: "raise" or "eager" (keep the eager gradients, continue eager).
                Defaults to "raise".
            dtype: The autocast dtype, for the default ``rtol``. Defaults to None (float32).
            data_parallel: How the processes split the data; the eager reference scales its
                losses as the train step does (``mean_over_data_parallel``). Defaults to None.
        """
        self.on_mismatch = check_policy("on_mismatch", on_mismatch)
        self.verify_rtol = _RTOL[dtype] if rtol is None else float(rtol)
        self.verify_steps, self.data_parallel = verify_steps, data_parallel
        if verify_steps and self.module is not None and is_sharded(self.module):
            # the parity check runs a deep copy of the model, and FSDP2 / DTensor models
            # cannot be copied: compiled and eager are compared by tests/parallel instead
            self.verify_steps = 0
            _logger.info("Graph mode: no parity check on a sharded model (FSDP / tensor "
                         "parallel models cannot be copied for the eager reference).")

    def _run_reference(self, args: tuple, kwargs: dict) -> tuple[nn.Module, Any]:
        """An eager copy of the model (with its gradients so far), run on the same batch and the
        same random numbers as the compiled call that follows."""
        model = self.unwrapped
        self._uncompile_blocks()  # a copy of a compiled block would call the original block
        try:
            reference = copy.deepcopy(model)
        finally:
            self._compile_blocks()
        for p, q in zip(model.parameters(), reference.parameters()):
            q.grad = None if p.grad is None else p.grad.detach().clone()
        device = next(model.parameters(), torch.empty(0)).device
        devices = [device.index or 0] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            out = reference(*args, **kwargs)
        return reference, out

    def _check_parity(self, loss: torch.Tensor, reference: nn.Module, outputs: Any,
                      backward: Callable[[torch.Tensor], Any], divisor: int, step: int,
                      last_micro_batch: bool) -> None:
        outputs = mean_over_data_parallel(outputs, self.data_parallel)
        try:
            ref_loss = outputs if isinstance(outputs, torch.Tensor) else parse_losses(outputs)[0]
        except TrainingError:
            _logger.info("Graph mode parity check skipped: the model's own train_step calls "
                         "forward for something other than its loss.")
            self.verify_steps = 0
            return
        backward(ref_loss / divisor if divisor != 1 else ref_loss)
        model = self.unwrapped
        if torch_dist.is_available() and torch_dist.is_initialized() and last_micro_batch:
            _average_grads(reference)  # as DDP did for the compiled model's gradients
        got = (float(loss.detach()) * divisor, _grad_norm(model))
        want = (float(ref_loss.detach()), _grad_norm(reference))
        rtol = self.verify_rtol
        ok = all(math.isclose(g, w, rel_tol=rtol, abs_tol=1e-6) for g, w in zip(got, want))
        text = (f"Graph mode parity check, step {step}: loss {got[0]:.7g} compiled vs "
                f"{want[0]:.7g} eager, gradient norm {got[1]:.7g} vs {want[1]:.7g}")
        if ok:
            _logger.info(f"{text}: equal within rtol={rtol:g}.")
            return
        if self.on_mismatch == "raise":
            raise GraphModeError(
                f"{text}: differ by more than rtol={rtol:g}. The compiled model does not compute "
                f"what the eager one does: check it in eager mode, or set "
                f"compile.on_mismatch='eager' to continue eager, or a larger "
                f"compile.verify_rtol if the difference is expected.")
        for p, q in zip(model.parameters(), reference.parameters()):
            p.grad = None if q.grad is None else q.grad
        self.eager = True
        self.failure = f"the parity check failed at step {step}"
        _logger.warning(f"{text}: differ by more than rtol={rtol:g}; this step uses the eager "
                        f"gradients and training continues in eager mode.")

    # -------------------------------------------------------------------------- report
    def _note_training_recompile(self) -> None:
        self.training_recompiles += 1
        if self.training_recompiles == _STORM:
            _logger.warning(
                f"Graph mode: the training graph was recompiled {self.training_recompiles} times "
                f"after the first step (last reason: {COMPILE_LOG.recompiles[-1]}). Input shapes "
                f"change between batches: pad them to a fixed length, set "
                f"compile=dict(dynamic=True), or bucket the lengths.")

    def graph_breaks(self) -> list[str]:
        return COMPILE_LOG.graph_breaks[self._breaks_at_start:]

    def recompiles(self) -> list[str]:
        start = self._recompiles_at_start
        return [f"({self._phases.get(i, 'update')}) {reason}"
                for i, reason in enumerate(COMPILE_LOG.recompiles[start:], start)]

    def report(self, final: bool = False) -> str:
        """One paragraph: compile time, graph breaks and recompiles with their reasons."""
        if self.eager:
            return f"Graph mode: eager since {self.failure or 'the parity check failed'}."
        parts = [f"{phase} {seconds:.1f} s" for phase, seconds in self.compile_seconds.items()]
        blocks = len(self._eager_forwards)
        head = (f"Graph mode{' (end of run)' if final else ''}"
                f"{f', {blocks} blocks compiled one by one' if blocks else ''}: first call per "
                f"graph (compile) {', '.join(parts) or 'none yet'}")
        return "\n".join([f"{head}; {self._counts()}", *self._details()])

    def _counts(self) -> str:
        return (f"{len(self.graph_breaks())} graph break(s), "
                f"{len(self.recompiles())} recompile(s).")

    def _details(self) -> list[str]:
        lines = [f"  graph break {where_kind(b)}: {b}" for b in dict.fromkeys(self.graph_breaks())]
        return lines + [f"  recompile: {r}" for r in dict.fromkeys(self.recompiles())]

    def first_step_report(self, seconds: float) -> str:
        """The line that ends the wait announced before the first compiled step: what the first
        step took in all (the forward's compile, then ``seconds``: the first backward and
        update), then graph breaks and recompiles (:meth:`report`)."""
        if self.eager:
            return self.report()
        forward = self.compile_seconds.get("train", 0.0)
        what = (f"the update (clipping, optimizer step) compiled in {self.update_seconds:.1f} s"
                if self.update_compiled else "the update runs eager (float16's GradScaler)")
        blocks = len(self._eager_forwards)
        head = (f"Graph mode: the training step is compiled"
                f"{f' ({blocks} blocks one by one)' if blocks else ''}: its first call took "
                f"{forward + seconds:.1f} s (forward {forward:.1f} s, backward and update "
                f"{seconds:.1f} s)")
        return "\n".join([f"{head}; {self._counts()}", *self._details(), f"  {what}."])


def _grad_norm(model: nn.Module) -> float:
    grads = [p.grad.detach().float().norm() for p in model.parameters() if p.grad is not None]
    return float(torch.stack(grads).norm()) if grads else 0.0


def _average_grads(model: nn.Module) -> None:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    torch_dist.all_reduce(flat)
    flat /= torch_dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
