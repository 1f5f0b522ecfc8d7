"""NonFiniteLossHook: notices NaN/Inf losses or gradients and raises, skips the step, or warns."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from libai.registry import HOOKS
from libai.utils import dist
from libai.utils.errors import ConfigError, TrainingError
from libai.utils.suggest import did_you_mean

from ._interval_sums import iterations_to_log
from .hook import Hook, RunnerView

__all__ = ["NonFiniteLossHook"]

_POLICIES = ("raise", "skip", "warn")

_FIXES = (
    "Possible fixes: lower the learning rate (or lengthen the warmup); clip gradients with "
    "optim_wrapper=dict(clip_grad=dict(max_norm=1.0), ...); with AMP float16, use bfloat16 or a "
    "dynamic loss scale"
)


def _first_non_finite(rows: list[Any]) -> int | None:
    """Index of the first row with a non-finite ``*loss*`` tensor entry, or None.

    One pass without a call per row: CPU values are read one by one (cheaper than a kernel
    there); values on an accelerator are stacked and read once.
    """
    on_device: list[torch.Tensor] = []
    owner: list[int] = []
    cpu_bad = None
    for i, row in enumerate(rows):
        if not isinstance(row, (dict, Mapping)):
            continue
        for key, value in row.items():
            if "loss" not in key or not isinstance(value, torch.Tensor):
                continue
            if value.ndim:
                value = value.sum()
            if not value.is_cpu:
                on_device.append(value)
                owner.append(i)
            elif not math.isfinite(value.item()):
                cpu_bad = i
                break
        if cpu_bad is not None:
            break
    if on_device:  # all from rows up to cpu_bad
        with torch.no_grad():
            finite = torch.stack([v.float().to(on_device[0].device) for v in on_device]).isfinite()
            if not bool(finite.all()):
                return owner[finite.tolist().index(False)]
    return cpu_bad


def _skips_on_device(optimizer: Any) -> bool:
    """Whether ``optimizer`` takes a step's verdict as a device tensor (``found_inf``, as a
    GradScaler hands it) and skips the update itself: torch's fused Adam, AdamW and SGD, over
    plain parameters (a sharded DTensor's gradient norms are per-process shards: their verdict
    is read as before)."""
    return (isinstance(optimizer, torch.optim.Optimizer)
            and getattr(optimizer, "_step_supports_amp_scaling", False)
            and all(g.get("fused") for g in optimizer.param_groups)
            and all(type(p) in (torch.Tensor, nn.Parameter)
                    for g in optimizer.param_groups for p in g["params"]))


def _read(pending: list[tuple[int, Any, Any]]) -> list[list[bool]]:
    """The per-parameter finite flags of each pending verdict, read in one transfer."""
    if not pending:
        return []
    device = pending[0][1][0].device
    read = torch.cat([finite.to(device) for _, (finite, _), _ in pending]).tolist()
    out, at = [], 0
    for _, (finite, _), _ in pending:
        out.append(read[at:at + finite.numel()])
        at += finite.numel()
    return out


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

    - ``'raise'``: when an iteration's loss (``outputs['loss']`` and every entry whose name
      contains ``loss``) is not finite, raise :class:`~libai.utils.errors.TrainingError` naming
      that iteration, its logged values and the usual fixes.
    - ``'warn'``: log the same facts as a warning and go on.
    - ``'skip'``: after the backward pass that precedes an optimizer step, if any gradient is not
      finite, drop all gradients (set them to None) so that the optimizer leaves the weights and
      its state unchanged for that step, and warn. The step's logged values are left out of the
      logger's averages. More than ``max_skips`` skipped steps in a row raise TrainingError.
      Under float16 AMP the GradScaler already skips such steps (and must see the bad gradients
      to lower its scale), so this policy then leaves them alone.

    When the checks happen, and what they cost: reading a value back from an accelerator waits
    for its queued work (a synchronisation), so 'raise' and 'warn' keep each iteration's loss
    values and read them in one batch every ``check_interval`` iterations (at multiples of it),
    before every validation and checkpoint save, and when training ends. Every iteration is
    checked and the report names the first bad one; training may run on for up to
    ``check_interval - 1`` iterations before it stops, but no validation and no checkpoint sees
    their weights. Under DDP the ranks decide together (one small collective per check), so that
    all stop. 'skip' must act before the step, so it checks gradients every ``check_interval``
    iterations (one fused norm) and protects only those steps. With a fused optimizer
    (``fused=True``: Adam, AdamW, SGD; the default on CUDA, see :mod:`libai.optim.fused`) 'skip'
    reads nothing per step: the verdict stays on the device and the fused kernel skips the
    update itself (as it does for a GradScaler), so every step is protected; the warning, the
    counters, ``max_skips`` and leaving the step out of the averages come when the logger's line
    is due (and before validation, each save and at the end): up to one log interval late.

    Args:
        policy: ``'raise'``, ``'skip'`` or ``'warn'``. Defaults to 'raise'.
        check_interval: See above. Defaults to None: 50 for 'raise' and 'warn', 1 for 'skip'.
        max_skips: With 'skip', the most steps skipped in a row before training stops. Defaults
            to 10.
    """

    priority = "HIGHEST"

    def __init__(self, policy: str = "raise", check_interval: int | None = None,
                 max_skips: int = 10) -> None:
        if policy not in _POLICIES:
            raise ConfigError(
                f"NonFiniteLossHook: policy must be one of {', '.join(_POLICIES)}, got "
                f"{policy!r}.{did_you_mean(str(policy), _POLICIES)}"
            )
        if check_interval is None:
            check_interval = 1 if policy == "skip" else 50
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
        self._pending: list[Any] = []  # logged values of the iterations not checked yet
        self._pending_from = 0  # the 0-based iteration of _pending[0]
        self._batch_len = check_interval  # checked when _pending is this long
        self._optimizer: Any = None  # 'skip' on a fused optimizer: handed the verdict per step
        self._verdict: Any = None  # this step's (per-parameter finite flags, parameter names)
        self._verdicts: list[tuple[int, Any, Any]] = []  # (iter, verdict, outputs) unread
        self._rows = 0  # iterations since the last log line (to find the next one)
        self._due_in = 1
        self._log_rule: tuple[int, int, bool, int | None] | None = None
        if policy != "skip":  # gradients are only inspected to skip steps
            self.disable_stage("after_backward")
            self.disable_stage("before_train")

    def _due(self, runner: RunnerView) -> bool:
        return (runner.iter + 1) % self.check_interval == 0

    # ------------------------------------------------------------------ raise / warn: loss
    def after_train_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        if self.policy == "skip":
            if self._optimizer is not None:
                self._after_device_step(runner, batch_idx, outputs)
                return
            if self._skipped_now and isinstance(outputs, dict):
                # this hook runs first: later hooks (the logger) then leave the skipped
                # step's NaN values out of their averages
                outputs.clear()
            self._skipped_now = False
            return
        pending = self._pending
        if not pending:  # a new batch, up to the next multiple of check_interval
            self._pending_from = start = runner.iter
            self._batch_len = self.check_interval - start % self.check_interval
        pending.append(outputs)  # checked in batches: a read per iteration would sync each one
        if len(pending) >= self._batch_len:
            self._check(runner)

    def before_val(self, runner: RunnerView) -> None:
        if self.policy == "skip":
            self._settle(runner)
        else:
            self._check(runner)

    def after_train(self, runner: RunnerView) -> None:
        self.before_val(runner)

    def before_save_checkpoint(self, runner: RunnerView, checkpoint: Any = None) -> None:
        # rank 0 only, so no collective here; the runner passes a failure on to every rank
        if self.policy == "skip":
            self._settle(runner)
        else:
            self._check(runner, collective=False)

    def _check(self, runner: RunnerView, collective: bool = True) -> None:
        rows = self._pending
        if collective:  # rank 0's own look before a save keeps them: every rank must clear
            self._pending = []  # the same rows at the same checks, or the collectives pair wrong
        if not rows:  # every rank runs the same iterations: all return here together
            return
        first = _first_non_finite(rows)
        bad_iter = math.inf if first is None else self._pending_from + first
        if collective and dist.is_distributed():
            bad_iter = dist.all_reduce_min(bad_iter)  # every rank learns of the earliest one
        if bad_iter == math.inf:
            return
        bad_iter = int(bad_iter)
        local = first is not None and self._pending_from + first == bad_iter
        values = _fmt(rows[first]) if local else "the values are on another process"
        where = f"iteration {bad_iter + 1}"
        if self.policy == "raise":
            raise TrainingError(
                f"Non-finite loss at {where}: {values}. {_FIXES}; or set "
                f"default_hooks=dict(nonfinite=dict(policy='skip')) to skip such steps."
            )
        more = sum(_first_non_finite([r]) is not None for r in rows) - 1 if first is not None else 0
        also = f" ({more} more up to iteration {self._pending_from + len(rows)})" if more > 0 else ""
        runner.logger.warning(f"Non-finite loss at {where}: {values}{also}. Training goes on.")

    # ------------------------------------------------------------------- skip: gradients
    def before_train(self, runner: RunnerView) -> None:
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
        optimizer = getattr(runner.optim_wrapper, "optimizer", None)
        self._optimizer = optimizer if not self._defer_to_scaler and _skips_on_device(
            optimizer) else None
        if self._optimizer is None:  # the verdict is read before each checked step instead
            for stage in ("before_val", "before_save_checkpoint", "after_train"):
                self.disable_stage(stage)
            return
        writer = runner.writer  # its lines are where the skipped steps are left out
        self._log_rule = None if writer is None else (
            writer.interval, runner.limit_iters(runner.max_iters), runner.max_epochs is not None,
            runner.train_loop.iters_per_epoch)
        self._rows = 0

    def after_backward(self, runner: RunnerView) -> None:
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
        if self._optimizer is not None:  # no read: the fused kernel skips on the flag itself
            self._optimizer.found_inf = (~finite.all()).float()
            self._verdict = (finite, [n for n, _ in with_grad])
            return
        if bool(finite.all()):
            self.skipped_in_row = 0
            return
        bad = [n for (n, _), ok in zip(with_grad, finite.tolist()) if not ok]
        for _, p in self._params:
            p.grad = None
        self._skipped_now = True
        self._count_skip(runner, runner.iter, bad)

    # ------------------------------------------------- skip on a fused optimizer: batched
    def _after_device_step(self, runner: RunnerView, batch_idx: int, outputs: Any) -> None:
        if self._verdict is not None:  # this iteration stepped: its verdict is spent
            self._optimizer.__dict__.pop("found_inf", None)
            self._verdicts.append((runner.iter, self._verdict, outputs))
            self._verdict = None
        if not self._rows:
            rule = self._log_rule
            self._due_in = 50 - runner.iter % 50 if rule is None else iterations_to_log(
                runner.iter, batch_idx, *rule)
        self._rows += 1
        if self._rows >= self._due_in:  # the logger reads its rows next: settle them first
            self._rows = 0
            self._settle(runner)

    def _settle(self, runner: RunnerView) -> None:
        """Read the pending verdicts (one device read) and do what 'skip' does per skipped step:
        leave its values out of the averages, count it, warn, give up past ``max_skips``."""
        pending, self._verdicts = self._verdicts, []
        for (it, (_, names), outputs), ok in zip(pending, _read(pending)):
            if all(ok):
                self.skipped_in_row = 0
                continue
            if isinstance(outputs, dict):
                outputs.clear()  # the logger (later in this stage) averages without them
            self._count_skip(runner, it, [n for n, good in zip(names, ok) if not good])

    def _count_skip(self, runner: RunnerView, it: int, bad: list[str]) -> None:
        self.skipped_in_row += 1
        self.skipped_total += 1
        where = f"iteration {it + 1}"
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
        total, in_row = self.skipped_total, self.skipped_in_row
        for ok in _read(self._verdicts):  # a save: the steps not settled yet count too
            total, in_row = (total, 0) if all(ok) else (total + 1, in_row + 1)
        return {"skipped_total": total, "skipped_in_row": in_row}

    def load_state_dict(self, state: dict) -> None:
        self.skipped_total = int(state.get("skipped_total", 0))
        self.skipped_in_row = int(state.get("skipped_in_row", 0))
