"""GraphOptimWrapper: graph mode, the training step compiled with ``torch.compile``.

The same model class, checkpoints, hooks and logs as eager; one config switch
(``optim_wrapper=dict(type="GraphOptimWrapper", ...)`` or ``tools/train.py --graph``):

- the model's forward with its loss is compiled (the runner wraps the model in
  :class:`libai.model.graph.GraphModule`); AOTAutograd generates and compiles the backward;
- the update (gradient clipping and ``optimizer.step``) is a second compiled function. Each
  group's learning rate becomes a 0-d tensor that the schedulers fill in place, so a new value
  is new data, not a new graph (torch's recipe for compiled optimizers with schedulers);
- ``dtype`` "bfloat16"/"float16" adds autocast as :class:`AmpOptimWrapper` does. float16's
  GradScaler step stays eager (it checks for inf/NaN on the host); bfloat16 needs no scaler.

Guard rails: ``verify_steps`` compares the first steps with an eager copy (loss and gradient
norm), ``on_failure`` chooses between eager fallback and an error when compiling fails, and the
compile report (graph breaks, recompiles) is logged after the first step and at the end.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.distributed as torch_dist
from torch import nn

from libai.registry import OPTIM_WRAPPERS
from libai.utils.dist import is_sharded
from libai.utils.errors import ConfigError
from libai.utils.suggest import did_you_mean

from .amp_optim_wrapper import AmpOptimWrapper
from .optim_wrapper import OptimWrapper, _check_count

__all__ = ["GraphOptimWrapper"]

_logger = logging.getLogger("libai")
# relative tolerance of the parity check: float32 kernels fused by inductor sum in another
# order (~1e-6 relative here); bf16/fp16 autocast rounds intermediates differently
_RTOL = {None: 1e-4, torch.bfloat16: 2e-2, torch.float16: 1e-2}


@OPTIM_WRAPPERS.register_module()
class GraphOptimWrapper(AmpOptimWrapper):
    """Graph mode: compiled forward, backward and update, with a parity check and a fallback.

    Args:
        optimizer: The optimizer to drive.
        dtype: None (float32), "bfloat16" or "float16" autocast. Defaults to None.
        loss_scale: For float16, as :class:`AmpOptimWrapper`. Defaults to "dynamic".
        compile: ``torch.compile`` arguments (``mode``, ``fullgraph``, ``dynamic``, ``backend``,
            ``options``) for the model and the update. Defaults to None (torch's defaults).
        verify_steps: Run the first K training steps also eagerly on a copy of the model and
            compare loss and gradient norm. Defaults to 1.
        verify_rtol: Relative tolerance of that check. Defaults to 1e-4 in float32, 2e-2 with
            bfloat16, 1e-2 with float16.
        on_failure: When compiling fails: "eager" (warn once, continue eager) or "raise".
            Defaults to "eager".
        on_mismatch: When the parity check fails: "raise" (stop, naming the step and both
            values) or "eager" (use the eager gradients for that step, continue eager).
            Defaults to "raise".
        exact_random: Draw random numbers (dropout) as eager does (inductor's
            ``fallback_random``), so that graph mode equals eager within float tolerance and the
            parity check can hold for models with dropout. False lets inductor generate them in
            its kernels: faster on a GPU, but not the same numbers as eager. Defaults to True.
        accumulative_counts: See :class:`OptimWrapper`. Defaults to 1.
        clip_grad: See :class:`OptimWrapper`. Defaults to None.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        dtype: str | torch.dtype | None = None,
        loss_scale: str | float | dict = "dynamic",
        compile: dict | None = None,
        verify_steps: int = 1,
        verify_rtol: float | None = None,
        on_failure: str = "eager",
        on_mismatch: str = "raise",
        exact_random: bool = True,
        accumulative_counts: int = 1,
        clip_grad: dict | None = None,
    ) -> None:
        if dtype is None:
            OptimWrapper.__init__(self, optimizer, accumulative_counts, clip_grad)
            self.dtype, self.scaler = None, None
        else:
            super().__init__(optimizer, dtype, loss_scale, accumulative_counts, clip_grad)
        from libai.model.graph import compile_options

        self.compile_options = compile_options(compile, exact_random)
        self.verify_steps = _check_count("verify_steps", verify_steps, 0)
        self.verify_rtol = _RTOL[self.dtype] if verify_rtol is None else float(verify_rtol)
        for name, value in (("on_failure", on_failure), ("on_mismatch", on_mismatch)):
            if value not in ("eager", "raise"):
                raise ConfigError(
                    f"optim_wrapper.{name}={value!r} is not a policy."
                    f"{did_you_mean(str(value), ('eager', 'raise'))} Use 'eager' or 'raise'.")
        self.on_failure, self.on_mismatch = on_failure, on_mismatch
        self.graph: Any = None  # the GraphModule, from bind_model
        self._data_parallel: Any = None  # from bind_model
        self._lr_tensors = [self._tensor_lr(group) for group in optimizer.param_groups]
        self._compiled_update = torch.compile(self._update, **self.compile_options)
        self._update_compiled = self._eager = self._reported = False
        self._update_seconds = 0.0

    @staticmethod
    def _tensor_lr(group: dict) -> torch.Tensor:
        lr = group["lr"]
        if not isinstance(lr, torch.Tensor):
            group["lr"] = lr = torch.tensor(float(lr), dtype=torch.float64)  # as exact as a float
        return lr

    def bind_model(self, graph: Any, data_parallel: Any = None) -> None:
        """Attach the runner's :class:`~libai.model.graph.GraphModule` (parity check, fallback).

        ``data_parallel``: how the processes split the data; the eager reference of the parity
        check scales its losses as the train step does (``mean_over_data_parallel``). Defaults
        to None: one share.
        """
        self.graph = graph
        self._data_parallel = data_parallel
        graph.verify_steps = self.verify_steps
        if self.verify_steps and is_sharded(graph):
            # the parity check runs a deep copy of the model, and FSDP2 / DTensor models
            # cannot be copied: compiled and eager are compared by tests/parallel instead
            graph.verify_steps = 0
            _logger.info("Graph mode: no parity check on a sharded model (FSDP / tensor "
                         "parallel models cannot be copied for the eager reference).")

    @property
    def eager(self) -> bool:
        """True once graph mode has fallen back to eager (a compile failure or a mismatch)."""
        return self._eager or (self.graph is not None and self.graph.eager)

    def _failed(self, error: BaseException, where: str) -> None:
        if self.graph is not None:
            self.graph.failed(error, where)  # raises, or warns and turns the model eager
            return
        from libai.model.graph import GraphModeError

        if self.on_failure == "raise":
            raise GraphModeError(f"Graph mode: torch.compile failed on {where}: {error}") from error
        _logger.warning(f"Graph mode: torch.compile failed on {where} ({error}); it runs eager.")
        self._eager = True

    # -------------------------------------------------------------------------- step
    def optim_context(self, model: nn.Module) -> AbstractContextManager:
        if self.dtype is None:
            return OptimWrapper.optim_context(self, model)
        return super().optim_context(model)

    def update_params(self, loss: torch.Tensor, step_kwargs: dict | None = None,
                      zero_kwargs: dict | None = None) -> None:
        if self._reported or self.graph is None:
            super().update_params(loss, step_kwargs, zero_kwargs)
            return
        stepping, start = self.should_update(), time.perf_counter()
        super().update_params(loss, step_kwargs, zero_kwargs)
        self.graph.first_step_done()  # the backward has compiled: no replay needed any more
        if stepping:  # the first optimizer step is done: report what compiling took
            self._reported = True
            seconds = time.perf_counter() - start
            _logger.info(self.graph.report() + self._update_report(seconds))

    def _run_backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        graph = self.graph
        try:
            super()._run_backward(loss, **kwargs)
        except Exception as e:  # a backward graph is compiled at its first call
            if graph is None or graph.eager or graph._replay is None:
                raise
            self.zero_grad()
            loss = self._eager_loss(graph)
            graph.failed(e, "the backward")
            super()._run_backward(loss / self._divisor(self._inner_count), **kwargs)
        if graph is not None and not graph.eager:
            reference = graph.take_reference()
            if reference is not None:
                self._check_parity(loss, *reference, **kwargs)

    def _eager_loss(self, graph: Any) -> torch.Tensor:
        from libai.model import parse_losses

        outputs = graph.replay_eager()
        return outputs if isinstance(outputs, torch.Tensor) else parse_losses(outputs)[0]

    def step(self, **kwargs: Any) -> None:
        """Clip and step, compiled (eager after a fallback, with ``kwargs``, or for float16)."""
        if self.scaler is not None or kwargs or self.eager:
            self._eager_lr()
            AmpOptimWrapper.step(self, **kwargs)  # without a scaler: OptimWrapper.step
            return
        if self._update_compiled:
            self._compiled_update()
            return
        start = time.perf_counter()
        try:
            self._compiled_update()
        except Exception as e:
            from libai.model.graph import _is_compile_error

            if not _is_compile_error(e):
                raise
            self._failed(e, "the optimizer update")
            self._eager_lr()
            OptimWrapper.step(self)
            return
        self._update_compiled = True
        self._update_seconds = time.perf_counter() - start

    def _update(self) -> None:
        if self._clip is not None:
            self._clip_grads()
        self.optimizer.step()

    def _eager_lr(self) -> None:
        """Back to float learning rates when the update runs eager (a plain optimizer's)."""
        if self._lr_tensors:
            for group in self.optimizer.param_groups:
                if isinstance(group["lr"], torch.Tensor):
                    group["lr"] = float(group["lr"])
            self._lr_tensors = []

    def _update_report(self, seconds: float) -> str:
        if self.eager:
            return ""
        what = (f"the update (clipping, optimizer step) compiled in {self._update_seconds:.1f} s"
                if self._update_compiled else "the update runs eager (float16's GradScaler)")
        return f"\n  {what}; the first backward and update took {seconds:.1f} s."

    # ------------------------------------------------------------------ parity check
    def _check_parity(self, loss: torch.Tensor, reference: nn.Module, outputs: Any,
                      **kwargs: Any) -> None:
        from libai.model import mean_over_data_parallel, parse_losses
        from libai.utils.errors import TrainingError

        outputs = mean_over_data_parallel(outputs, self._data_parallel)
        try:
            ref_loss = outputs if isinstance(outputs, torch.Tensor) else parse_losses(outputs)[0]
        except TrainingError:
            _logger.info("Graph mode parity check skipped: the model's own train_step calls "
                         "forward for something other than its loss.")
            self.graph.verify_steps = 0
            return
        divisor = self._divisor(self._inner_count)
        scaled = ref_loss / divisor if divisor != 1 else ref_loss
        (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward(**kwargs)
        model = self.graph.unwrapped
        if torch_dist.is_available() and torch_dist.is_initialized() and self.should_update():
            _average_grads(reference)  # as DDP did for the compiled model's gradients
        step = self._inner_count + 1
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
            from libai.model.graph import GraphModeError

            raise GraphModeError(
                f"{text}: differ by more than rtol={rtol:g}. The compiled model does not compute "
                f"what the eager one does: check it in eager mode, or set "
                f"optim_wrapper.on_mismatch='eager' to continue eager, or a larger "
                f"optim_wrapper.verify_rtol if the difference is expected.")
        for p, q in zip(model.parameters(), reference.parameters()):
            p.grad = None if q.grad is None else q.grad
        self.graph.eager = True
        self.graph.failure = f"the parity check failed at step {step}"
        _logger.warning(f"{text}: differ by more than rtol={rtol:g}; this step uses the eager "
                        f"gradients and training continues in eager mode.")

    # --------------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """As :class:`OptimWrapper`'s, with float learning rates: eager and graph checkpoints
        are interchangeable."""
        state = super().state_dict()
        for group in state["optimizer"]["param_groups"]:
            if isinstance(group.get("lr"), torch.Tensor):
                group["lr"] = float(group["lr"])
        return state

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        super().load_state_dict(state_dict)
        for group, tensor in zip(self.optimizer.param_groups, self._lr_tensors):
            tensor.fill_(float(group["lr"]))  # the same tensor the compiled update reads
            group["lr"] = tensor

    def scalars(self) -> dict[str, float]:
        return super().scalars() if self.scaler is not None else OptimWrapper.scalars(self)

    def __repr__(self) -> str:
        dtype = None if self.dtype is None else str(self.dtype).replace("torch.", "")
        return OptimWrapper.__repr__(self)[:-1] + f", dtype={dtype}, compile={self.compile_options})"


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
