"""GraphOptimWrapper: graph mode's face in the config, the training step compiled.

The same model class, checkpoints, hooks and logs as eager; one config switch (``compile=...``,
which ``tools/train.py --graph`` sets; a config naming ``optim_wrapper=dict(type=
"GraphOptimWrapper", ...)`` asks for the same, and a compiled run's OptimWrapper or
AmpOptimWrapper config becomes one: :func:`compiled_wrapper_cfg`). What graph
mode compiles, checks and falls back to is owned by :class:`libai.model.graph.GraphMode` (read
its package docstring); this wrapper only asks it:

- its backward goes through ``GraphMode.backward`` (the fallback of a backward that fails to
  compile, and the parity check of the first ``verify_steps`` steps);
- its update (gradient clipping and ``optimizer.step``) through ``GraphMode.run_update``, which
  compiles it. Each group's learning rate becomes a 0-d tensor that the schedulers fill in place,
  so a new value is new data, not a new graph (torch's recipe for compiled optimizers with
  schedulers); checkpoints hold floats;
- ``dtype`` "bfloat16"/"float16" is a :class:`~libai.optim.precision.Precision` policy, as for
  :class:`AmpOptimWrapper`. float16's GradScaler step stays eager (it checks for inf/NaN on the
  host); bfloat16 needs no scaler.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import torch

from libai.model.graph import GraphMode, compile_options
from libai.registry import OPTIM_WRAPPERS

from .amp_optim_wrapper import mixed_precision
from .optim_wrapper import OptimWrapper, _check_count
from .precision import Precision

__all__ = ["GraphOptimWrapper"]

_logger = logging.getLogger("libai")


@OPTIM_WRAPPERS.register_module()
class GraphOptimWrapper(OptimWrapper):
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

    compiles_step = True  # what graph_options (libai.model.graph) looks for

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
        if not isinstance(optimizer, torch.optim.Optimizer):
            super().__init__(optimizer)  # raises its ConfigError, before dtype is looked at
        precision = (Precision() if dtype is None
                     else mixed_precision(optimizer, dtype, loss_scale, "GraphOptimWrapper"))
        super().__init__(optimizer, accumulative_counts, clip_grad, precision=precision)
        self.compile_options = compile_options(compile, exact_random)
        self.verify_steps = _check_count("verify_steps", verify_steps, 0)
        self.verify_rtol, self.on_mismatch, self.on_failure = verify_rtol, on_mismatch, on_failure
        # graph mode's owner: this wrapper's own until bind hands it the model's
        self.graph_mode = GraphMode(self.compile_options, on_failure)
        self.graph_mode.check_parity(self.verify_steps, verify_rtol, on_mismatch, precision.dtype)
        self._lr_tensors = [self._tensor_lr(group) for group in optimizer.param_groups]
        self._reported = False

    @staticmethod
    def _tensor_lr(group: dict) -> torch.Tensor:
        lr = group["lr"]
        if not isinstance(lr, torch.Tensor):
            group["lr"] = lr = torch.tensor(float(lr), dtype=torch.float64)  # as exact as a float
        return lr

    def bind(self, execution: Any, data_parallel: Any = None) -> None:
        """As :meth:`OptimWrapper.bind`; a compiled run's record also hands over its
        :class:`~libai.model.graph.GraphMode` (one owner for the model, the backward and the
        update), which takes this wrapper's parity check.

        ``data_parallel``: how the processes split the data; the eager reference of the parity
        check scales its losses as the train step does. Defaults to None: one share.
        """
        super().bind(execution, data_parallel)
        if execution.graph is None:
            return
        self.graph_mode = execution.graph
        self.graph_mode.check_parity(self.verify_steps, self.verify_rtol, self.on_mismatch,
                                     self.precision.dtype, data_parallel)

    def bind_model(self, graph: Any, data_parallel: Any = None) -> None:
        """:meth:`bind` for a :class:`~libai.model.graph.GraphModule` used without a runner."""
        from libai.model.execution import Execution

        self.bind(Execution(model=graph, unwrapped=graph.unwrapped, parts=(graph,),
                            graph=graph.graph_mode, compiled=True), data_parallel)

    @property
    def eager(self) -> bool:
        """True once graph mode has fallen back to eager (a compile failure or a mismatch)."""
        return self.graph_mode.eager

    @property
    def _update_compiled(self) -> bool:
        return self.graph_mode.update_compiled

    @property
    def dtype(self) -> torch.dtype | None:
        """The autocast dtype (the precision policy's), None in float32."""
        return self.precision.dtype

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The float16 GradScaler (the precision policy's), or None."""
        return self.precision.scaler

    # -------------------------------------------------------------------------- step
    def update_params(self, loss: torch.Tensor | None, step_kwargs: dict | None = None,
                      zero_kwargs: dict | None = None) -> None:
        if self._reported or self.graph_mode.module is None or loss is None:
            # loss None: a pipeline's schedule ran the step, the forward was not graph mode's
            super().update_params(loss, step_kwargs, zero_kwargs)
            return
        stepping, start = self.should_update(), time.perf_counter()
        super().update_params(loss, step_kwargs, zero_kwargs)
        if stepping:  # the first optimizer step is done: report what compiling took
            self._reported = True
            _logger.info(self.graph_mode.first_step_report(time.perf_counter() - start))

    def _run_backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        count = self._inner_count

        def backward(value: torch.Tensor) -> None:
            self.precision.backward(value, **kwargs)

        self.graph_mode.backward(loss, backward, divisor=self._divisor(count), step=count + 1,
                                 last_micro_batch=self._window_complete(count),
                                 zero_grad=self.zero_grad)

    def step(self, **kwargs: Any) -> None:
        """Clip and step, compiled (eager after a fallback, with ``kwargs``, or for float16)."""
        if self.precision.scaler is not None or kwargs or not self.graph_mode.run_update(
                self._update):
            self._eager_lr()
            super().step(**kwargs)

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

    def __repr__(self) -> str:
        return (super().__repr__()[:-1]
                + f", dtype={self.precision.name}, compile={self.compile_options})")


def compiled_wrapper_cfg(cfg: Any, switch: dict) -> Any:
    """The ``optim_wrapper`` config of a compiled run (``compile=...``): its update runs through
    graph mode, which :class:`GraphOptimWrapper` drives. ``OptimWrapper`` and
    ``AmpOptimWrapper`` configs (their ``dtype`` and ``loss_scale`` kept) become one, with the
    switch's options (``switch``: :func:`libai.model.graph.graph_options`); a GraphOptimWrapper
    (or subclass), as a dict or built, is left as it is.

    Raises:
        ConfigError: another wrapper type, or a built wrapper that is not a GraphOptimWrapper.
    """
    from libai.model.graph import wrapper_switch
    from libai.utils.errors import ConfigError

    if wrapper_switch(cfg) is not None:  # a GraphOptimWrapper config (or one built)
        return cfg
    kind = cfg.get("type", "OptimWrapper") if isinstance(cfg, Mapping) else None
    if kind not in ("OptimWrapper", "AmpOptimWrapper"):
        raise ConfigError(
            f"compile=... trains with GraphOptimWrapper (graph mode's compiled update), which "
            f"stands in for OptimWrapper and AmpOptimWrapper configs, not for optim_wrapper="
            f"{kind or type(cfg).__name__!r}: give optim_wrapper as a dict of one of those, or "
            f"subclass GraphOptimWrapper.")
    return {**cfg, "type": "GraphOptimWrapper", **switch}
