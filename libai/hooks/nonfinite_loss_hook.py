"""NonFiniteLossHook: notices NaN/Inf losses or gradients and raises, skips the step, or warns."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from libai.registry import HOOKS
from libai.utils.errors import ConfigError, TrainingError
from libai.utils.suggest import did_you_mean

from .hook import Hook

__all__ = ["NonFiniteLossHook"]

_POLICIES = ("raise", "skip", "warn")

_FIXES = (
    "Possible fixes: lower the learning rate (or lengthen the warmup); clip gradients with "
    "optim_wrapper=dict(clip_grad=dict(max_norm=1.0), ...); with AMP float16, use bfloat16 or a "
    "dynamic loss scale"
)


def _losses(outputs: Any) -> dict[str, torch.Tensor]:
    if not isinstance(outputs, Mapping):
        return {}
    return {k: v for k, v in outputs.items() if "loss" in k and isinstance(v, torch.Tensor)}


def _all_finite(outputs: Any) -> bool:
    """True when every ``*loss*`` tensor entry is finite, with one device read.

    Runs every iteration: the usual dict with one loss tensor takes a loop and one ``item()``.
    """
    if not isinstance(outputs, (dict, Mapping)):  # dict first: an ABC check is slower
        return True
    found = None
    for key, value in outputs.items():
        if "loss" in key and isinstance(value, torch.Tensor):
            if found is not None:  # several losses: one stacked check
                losses = [v for k, v in outputs.items() if "loss" in k and isinstance(v, torch.Tensor)]
                return bool(torch.stack([v if v.ndim == 0 else v.sum() for v in losses]).isfinite().all())
            found = value
    if found is None:
        return True
    return math.isfinite(found.item() if found.ndim == 0 else found.sum().item())


def _fmt(outputs: Mapping[str, Any]) -> str:
    parts = []
    for k, v in outputs.items():
        value = v.detach().float().mean().item() if isinstance(v, torch.Tensor) else v
        parts.append(f"{k}={value:.6g}" if isinstance(value, float) else f"{k}={value}")
    return ", ".join(parts)


@HOOKS.register_module()
class NonFiniteLossHook(Hook):
    """Watch for NaN or infinite losses (and gradients, with ``policy='skip'``).

    Policies:

    - ``'raise'``: after an iteration whose loss (``outputs['loss']`` and every entry whose name
      contains ``loss``) is not finite, raise :class:`~libai.utils.errors.TrainingError` naming the
      iteration, the logged values and the usual fixes. The last checkpoint is untouched.
    - ``'skip'``: after the backward pass that precedes an optimizer step, if any gradient is not
      finite, drop all gradients (set them to None) so that the optimizer leaves the weights and
      its state unchanged for that step, and warn. The step's logged values are left out of the
      logger's averages. More than ``max_skips`` skipped steps in a row raise TrainingError. Under float16 AMP the GradScaler already skips such steps (and
      must see the bad gradients to lower its scale), so this policy then leaves them alone.
    - ``'warn'``: log a warning and go on.

    Cost: a check reads a value back from the device, which waits for the queued work to finish
    (a synchronisation) once per ``check_interval`` iterations. For 'raise' and 'warn' it is one
    small reduction over the loss values; for 'skip' one fused norm over all gradients. On GPU
    with a fast model, ``check_interval=10`` or more hides most of the cost ('skip' then only
    protects the checked steps).

    Args:
        policy: ``'raise'``, ``'skip'`` or ``'warn'``. Defaults to 'raise'.
        check_interval: Check every this many iterations. Defaults to 1.
        max_skips: With 'skip', the most steps skipped in a row before training stops. Defaults
            to 10.
    """

    priority = "HIGHEST"

    def __init__(self, policy: str = "raise", check_interval: int = 1, max_skips: int = 10) -> None:
        if policy not in _POLICIES:
            raise ConfigError(
                f"NonFiniteLossHook: policy must be one of {', '.join(_POLICIES)}, got "
                f"{policy!r}.{did_you_mean(str(policy), _POLICIES)}"
            )
        for name, value in (("check_interval", check_interval), ("max_skips", max_skips)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"NonFiniteLossHook: {name} must be an int >= 1, got {value!r}.")
        self.policy = policy
        self.check_interval = check_interval
        self.max_skips = max_skips
        self.skipped_total = 0
        self.skipped_in_row = 0
        self._params: list[tuple[str, torch.Tensor]] = []
        self._defer_to_scaler = False
        self._skipped_now = False
        if policy != "skip":  # gradients are only inspected to skip steps
            self.disable_stage("after_backward")
            self.disable_stage("before_train")

    def _due(self, runner: Any) -> bool:
        return (runner.iter + 1) % self.check_interval == 0

    # ------------------------------------------------------------------ raise / warn: loss
    def after_train_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        if self.policy == "skip":
            if self._skipped_now and isinstance(outputs, dict):
                # this hook runs first: later hooks (the logger) then leave the skipped
                # step's NaN values out of their averages
                outputs.clear()
            self._skipped_now = False
            return
        if self.check_interval > 1 and not self._due(runner):
            return
        if _all_finite(outputs):
            return
        where = f"iteration {runner.iter + 1}"
        if self.policy == "raise":
            raise TrainingError(
                f"Non-finite loss at {where} (epoch {runner.epoch}): {_fmt(outputs)}. {_FIXES}; "
                f"or set default_hooks=dict(nonfinite=dict(policy='skip')) to skip such steps."
            )
        runner.logger.warning(f"Non-finite loss at {where}: {_fmt(outputs)}. Training goes on.")

    # ------------------------------------------------------------------- skip: gradients
    def before_train(self, runner: Any) -> None:
        if self.policy != "skip":
            return
        self._params = [
            (n, p) for n, p in runner.unwrapped_model.named_parameters() if p.requires_grad
        ]
        self._defer_to_scaler = getattr(runner.optim_wrapper, "scaler", None) is not None
        if self._defer_to_scaler:
            runner.logger.info(
                "NonFiniteLossHook(policy='skip'): float16 AMP is on; its GradScaler skips "
                "steps with non-finite gradients, so this hook leaves them to it."
            )

    def after_backward(self, runner: Any) -> None:
        if self.policy != "skip" or self._defer_to_scaler or not self._due(runner):
            return
        should_update = getattr(runner.optim_wrapper, "should_update", None)
        if callable(should_update) and not should_update():
            return  # accumulating: the window's last backward sees the summed gradients
        with_grad = [(n, p.grad) for n, p in self._params if p.grad is not None]
        if not with_grad:
            return
        norms = torch._foreach_norm([g for _, g in with_grad])
        finite = torch.stack(norms).isfinite()
        if bool(finite.all()):
            self.skipped_in_row = 0
            return
        bad = [n for (n, _), ok in zip(with_grad, finite.tolist()) if not ok]
        for _, p in self._params:
            p.grad = None
        self._skipped_now = True
        self.skipped_in_row += 1
        self.skipped_total += 1
        where = f"iteration {runner.iter + 1}"
        if self.skipped_in_row > self.max_skips:
            raise TrainingError(
                f"Non-finite gradients at {where}: {self.skipped_in_row} optimizer steps in a "
                f"row were skipped (max_skips={self.max_skips}); e.g. in {', '.join(bad[:3])}. "
                f"{_FIXES}; or raise max_skips."
            )
        runner.logger.warning(
            f"Non-finite gradients at {where} in {len(bad)} parameter(s) "
            f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}): skipped this optimizer "
            f"step ({self.skipped_in_row} in a row, {self.skipped_total} in total)."
        )

    def state_dict(self) -> dict:
        return {"skipped_total": self.skipped_total, "skipped_in_row": self.skipped_in_row}

    def load_state_dict(self, state: dict) -> None:
        self.skipped_total = int(state.get("skipped_total", 0))
        self.skipped_in_row = int(state.get("skipped_in_row", 0))
