"""OptimWrapper: one object owns the optimizer step, so the training loop stays simple.

A model's ``train_step`` does::

    with optim_wrapper.optim_context(model):   # DDP no_sync while accumulating (+ autocast for AMP)
        loss = model(batch)
    optim_wrapper.update_params(loss)          # backward; on a window's last call: clip, step, zero

Gradient accumulation, DDP ``no_sync``, clipping and mixed precision all change here, and only
here; mixed precision is a policy the wrapper holds (``self.precision``, see ``precision.py``). Escape hatches: call ``backward``/``step``/``zero_grad`` yourself, or subclass and override
``step`` (register the subclass in OPTIM_WRAPPERS and name it in ``optim_wrapper.type``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

from libai.registry import OPTIM_WRAPPERS
from libai.utils.errors import CheckpointError, ConfigError

from .clip import clip_grad_norm_, parse_clip_grad
from .grads import fast_zero_grad, load_grads
from .precision import Precision

_NO_CONTEXT = nullcontext()

__all__ = ["OptimWrapper"]


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"optim_wrapper.{name} must be an integer >= {minimum}, got {value!r}.")
    return value


@OPTIM_WRAPPERS.register_module()
class OptimWrapper:
    """Wraps a torch optimizer with gradient accumulation, clipping and DDP ``no_sync``.

    Args:
        optimizer: The optimizer to drive.
        accumulative_counts: Number of ``update_params`` calls (micro-batches) per optimizer
            step; each loss is divided by the window size so that the summed gradient is the
            mean over the window. Defaults to 1.
        clip_grad: ``dict(type="norm", max_norm=1.0, norm_type=2)`` or
            ``dict(type="value", clip_value=0.5)``; extra keys go to the torch clip function.
            Defaults to None (no clipping).
        precision: The :class:`~libai.optim.precision.Precision` policy (autocast dtype,
            GradScaler); :class:`AmpOptimWrapper` builds one from its ``dtype``. Defaults to
            None: float32.

    Raises:
        ConfigError: a bad ``accumulative_counts`` or ``clip_grad``.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        accumulative_counts: int = 1,
        clip_grad: dict | None = None,
        *,
        precision: Precision | None = None,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ConfigError(
                f"{type(self).__name__} needs a torch.optim.Optimizer, got "
                f"{type(optimizer).__name__}. Build one from optim_wrapper.optimizer."
            )
        self.optimizer = optimizer
        self.accumulative_counts = _check_count("accumulative_counts", accumulative_counts, 1)
        self._clip = parse_clip_grad(clip_grad)
        if precision is not None and not isinstance(precision, Precision):
            raise ConfigError(
                f"{type(self).__name__}(precision=...) takes a libai.optim.Precision, got "
                f"{type(precision).__name__}. For mixed precision write "
                f"optim_wrapper=dict(type='AmpOptimWrapper', dtype='bfloat16')."
            )
        self.precision = precision or Precision()
        self._inner_count = 0  # update_params calls so far, over the whole run
        self._max_counts: int | None = None
        self._restored_grads_at: int | None = None
        self._after_backward: list[Callable[[], Any]] = []
        # how the norm clip combines over processes: the execution record's (see bind)
        self._norm_over: dict[str, Any] = {}
        self._grad_norm: torch.Tensor | None = None  # kept on device; read lazily in scalars()
        self._accumulate = self._flush_grads = None  # across processes: the record's (bind)
        cls = type(self)
        # optim_context not overridden and no autocast: with accumulative_counts == 1 the
        # forward needs no context at all, so a training step may call the model directly
        # (see make_train_step)
        self.plain_forward = (cls.optim_context is OptimWrapper.optim_context
                              and not self.precision.enabled)
        self._plain_steps = self.precision.scaler is None and all(  # update_params may then
            getattr(cls, name) is getattr(OptimWrapper, name)    # inline them (see there)
            for name in ("backward", "_run_backward", "step", "zero_grad")
        )

    # ------------------------------------------------------------------ accumulation state
    def initialize_count_status(self, model: nn.Module, init_counts: int, max_counts: int) -> None:
        """Set where training starts and how long it lasts, before the first ``update_params``.

        Args:
            model: The trained model; only inspected for a warning about BatchNorm statistics,
                which see micro-batches, not the accumulated batch.
            init_counts: Iterations already done (the resume point).
            max_counts: Total training iterations; the last window may be shorter than
                ``accumulative_counts`` and its losses are divided by its real size.
        """
        self._inner_count = _check_count("init_counts", init_counts, 0)
        self._max_counts = _check_count("max_counts", max_counts, 1)
        k = self.accumulative_counts
        if k > 1 and init_counts % k and self._restored_grads_at != init_counts:
            warnings.warn(
                f"Training starts at iteration {init_counts}, inside a gradient accumulation "
                f"window of {k}; the gradients of the window's first {init_counts % k} "
                f"micro-batches are not available, so this window's step uses fewer of them.",
                stacklevel=2,
            )
        if k > 1 and any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
            warnings.warn(
                f"The model has BatchNorm layers and accumulative_counts={k}: their statistics "
                f"are computed per micro-batch, not per accumulated batch.",
                stacklevel=2,
            )

    @property
    def inner_count(self) -> int:
        """Number of ``update_params`` calls made so far (the global iteration)."""
        return self._inner_count

    def _window_complete(self, count: int) -> bool:
        k = self.accumulative_counts
        if k == 1 or (count + 1) % k == 0:
            return True
        return self._max_counts is not None and count + 1 >= self._max_counts

    def _divisor(self, count: int) -> int:
        k = self.accumulative_counts
        if k > 1 and self._max_counts is not None:
            rest = self._max_counts % k
            if rest and count >= self._max_counts - rest:
                return rest  # the last, short window
        return k

    def should_update(self) -> bool:
        """True when the coming ``update_params`` call ends a window and steps the optimizer."""
        return self._window_complete(self._inner_count)

    # -------------------------------------------------------------------------- hot path
    def optim_context(self, model: nn.Module) -> AbstractContextManager:
        """Context for the forward pass: in a window the record's ``accumulate(last)`` (DDP
        ``no_sync`` but on the last; FSDP2: libai.parallel.accumulate), and autocast.

        A plain method returning a ready context (not a generator): it runs every step.

        Args:
            model: The model called inside (unbound: its ``no_sync``, if it has one).
        """
        if self.accumulative_counts == 1:
            sync = _NO_CONTEXT
        elif self._accumulate is not None:
            sync = self._accumulate(self._window_complete(self._inner_count))
        elif self._window_complete(self._inner_count):
            sync = _NO_CONTEXT
        else:
            sync = model.no_sync() if hasattr(model, "no_sync") else _NO_CONTEXT
        precision = self.precision
        return sync if precision.dtype is None else precision.context(model, sync)

    def update_params(
        self,
        loss: torch.Tensor | None,
        step_kwargs: dict | None = None,
        zero_kwargs: dict | None = None,
    ) -> None:
        """Backward ``loss / window size``; at the end of a window clip, step and zero grads.

        Args:
            loss: The scalar loss of one micro-batch; None when its backward has run already
                (a pipeline schedule runs it, the losses divided by :meth:`loss_divisor`).
            step_kwargs: Keyword arguments for ``step``. Defaults to None.
            zero_kwargs: Keyword arguments for ``zero_grad``. Defaults to None.
        """
        count = self._inner_count
        if loss is None:
            for fn in self._after_backward:
                fn()
            self._inner_count = count + 1
            if self._window_complete(count):
                self.step(**(step_kwargs or {}))
                self.zero_grad(**(zero_kwargs or {}))
            return
        if self._plain_steps and self.accumulative_counts == 1 and not (step_kwargs or zero_kwargs):
            # the common case, run every iteration: what backward/step/zero_grad below would do,
            # without their calls (a subclass overriding any of them never gets here)
            loss.backward()
            for fn in self._after_backward:
                fn()
            self._inner_count = count + 1
            if self._clip is not None:
                self._clip_grads()
            self.optimizer.step()
            fast_zero_grad(self.optimizer)
            return
        divisor = self._divisor(count)
        self.backward(loss / divisor if divisor != 1 else loss)
        self._inner_count = count + 1
        if self._window_complete(count):
            self.step(**(step_kwargs or {}))
            self.zero_grad(**(zero_kwargs or {}))

    def loss_divisor(self) -> int:
        """What the coming ``update_params`` divides its loss by: the accumulation window's size
        (1 without accumulation). A step whose backward runs elsewhere divides by it itself."""
        return self._divisor(self._inner_count)

    def bind(self, execution: Any, data_parallel: Any = None) -> None:
        """Take what the run's :class:`~libai.model.execution.Execution` record says the step
        needs: how the gradient norm combines over processes (a pipeline's stages) and which
        parameters it skips. The runner calls it once, before the first step.

        Args:
            execution: The record.
            data_parallel: How the processes split the data (graph mode's parity check scales
                its losses by it). Defaults to None: one share.

        Raises:
            ConfigError: a GradScaler (float16) and a schedule that runs the backward itself.
        """
        if execution.schedule is not None and self.precision.scaler is not None:
            raise ConfigError("float16 mixed precision scales the loss before the backward, "
                              "which a pipeline schedule runs itself: use dtype='bfloat16' "
                              "(no loss scaling) with parallel.pipeline.")
        self._norm_over = ({} if execution.combine_norm is None else
                           dict(combine=execution.combine_norm, skip=execution.norm_skip))
        self._accumulate, self._flush_grads = execution.accumulate, execution.flush_grads

    def register_after_backward(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` after every ``backward``, before any optimizer step.

        Args:
            fn: A callable taking no arguments (the runner registers its after_backward stage).
        """
        self._after_backward.append(fn)

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Run ``loss.backward(**kwargs)``, then the after-backward callbacks.

        Args:
            loss: The (already divided) loss.
            **kwargs: Passed to ``torch.Tensor.backward``.
        """
        self._run_backward(loss, **kwargs)
        for fn in self._after_backward:
            fn()

    def _run_backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.precision.backward(loss, **kwargs)  # scaled first under a GradScaler

    def step(self, **kwargs: Any) -> None:
        """Clip the gradients (if configured) and step the optimizer. Under a GradScaler
        (float16) the gradients are unscaled before clipping and a step with inf/NaN gradients
        is skipped.

        Args:
            **kwargs: Passed to ``optimizer.step``.
        """
        self.precision.step(self.optimizer, None if self._clip is None else self._clip_grads,
                            **kwargs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients.

        Args:
            set_to_none: Set gradients to None instead of zero tensors. Defaults to True.
        """
        fast_zero_grad(self.optimizer, set_to_none)

    def _clip_grads(self) -> None:
        if self._clip is None:
            return
        params = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
        if not params:
            return
        kind, kwargs = self._clip
        if kind == "norm":
            self._grad_norm = clip_grad_norm_(params, **kwargs, **self._norm_over)
        else:
            nn.utils.clip_grad_value_(params, **kwargs)

    # ---------------------------------------------------------------------- inspection
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The optimizer's parameter groups."""
        return self.optimizer.param_groups

    @property
    def defaults(self) -> dict[str, Any]:
        """The optimizer's default options."""
        return self.optimizer.defaults

    def get_lr(self) -> dict[str, list[float]]:
        """Learning rate of every parameter group, as ``{"lr": [...]}``."""
        return {"lr": [float(g["lr"]) for g in self.param_groups]}

    def get_momentum(self) -> dict[str, list[float]]:
        """Momentum of every group (``betas[0]`` for Adam-like optimizers, 0 if it has none)."""
        values = []
        for g in self.param_groups:
            if "momentum" in g:
                values.append(float(g["momentum"]))
            elif "betas" in g:
                values.append(float(g["betas"][0]))
            else:
                values.append(0.0)
        return {"momentum": values}

    def scalars(self) -> dict[str, float]:
        """Values to log: ``grad_norm`` (total norm before clipping) when norm clipping is on,
        and ``loss_scale`` under a GradScaler (float16).

        Converting to float synchronizes with the device: call it at the logging interval only.
        """
        out: dict[str, float] = {}
        if self._grad_norm is not None:
            out["grad_norm"] = float(self._grad_norm)
        out.update(self.precision.scalars())
        return out

    # --------------------------------------------------------------------- checkpointing
    def _params(self) -> list[torch.Tensor]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state and accumulation position, and the GradScaler's (``loss_scaler``)
        under float16.

        When saved inside an accumulation window, the gradients accumulated so far are saved
        too (``accumulated_grads``), so that a resume continues the window exactly.
        """
        state: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "inner_count": self._inner_count,
            # the last step's value, logged until the next step: a resume must log it too
            "grad_norm": None if self._grad_norm is None else float(self._grad_norm),
        }
        grads = self.accumulated_grads()
        if grads is not None:
            state["accumulated_grads"] = grads
        state.update(self.precision.state_dict())
        return state

    def accumulated_grads(self) -> list[torch.Tensor | None] | None:
        """Copies of the gradients summed so far in an unfinished window; None between windows.

        Under DDP each rank holds its own (``no_sync``): the runner gathers them by rank.
        """
        if not self._inner_count % self.accumulative_counts:
            return None
        if self._flush_grads is not None:  # FSDP2 keeps them unreduced until the window ends
            self._flush_grads()
        return [None if p.grad is None else p.grad.detach().clone() for p in self._params()]

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (a plain optimizer state dict also works).

        Raises:
            CheckpointError: the dict has neither form, or its gradients do not match.
        """
        if "optimizer" not in state_dict:
            if "state" in state_dict and "param_groups" in state_dict:
                self.optimizer.load_state_dict(state_dict)
                return
            raise CheckpointError(
                f"Cannot load the optim wrapper state: expected an 'optimizer' key, got keys "
                f"{sorted(map(str, state_dict))}."
            )
        if state_dict["optimizer"] is not None:  # None: a sharded checkpoint has loaded it
            self.optimizer.load_state_dict(state_dict["optimizer"])
        self._inner_count = int(state_dict.get("inner_count", 0))
        self._grad_norm = state_dict.get("grad_norm")
        grads = state_dict.get("accumulated_grads")
        if grads is not None:
            load_grads(self._params(), grads)
        if grads is not None or state_dict.get("grads_in_shards"):
            self._restored_grads_at = self._inner_count
        self.precision.load_state_dict(state_dict)

    def __repr__(self) -> str:
        clip = None if self._clip is None else {"type": self._clip[0], **self._clip[1]}
        return (
            f"{type(self).__name__}(optimizer={type(self.optimizer).__name__}, "
            f"accumulative_counts={self.accumulative_counts}, clip_grad={clip})"
        )
