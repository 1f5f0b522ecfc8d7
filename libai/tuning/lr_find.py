"""Learning-rate range test: train a few steps with an exponentially growing lr, plot the loss.
:func:`find_lr` is the Python API; ``libai lr-find`` and ``python tools/lr_find.py`` print it.

    libai lr-find CONFIG [--cfg-options key=value ...] [--start-lr 1e-7] [--end-lr 10]
        [--num-iters 100] [--diverge 4.0] [--smooth 0.05] [--out lr_find.png] [--amp] [--debug]

Leslie Smith's LR range test, as PyTorch Lightning's ``lr_find`` runs it: the model, data and
optimizer are built from the config (a Runner in a temporary work dir, deleted at the end: no
log, checkpoint or run folder is left behind), then ``--num-iters`` optimizer steps are taken
with the lr of step i set to ``start * (end / start) ** (i / (num_iters - 1))``. A parameter
group keeps its ratio to the optimizer's lr (paramwise ``lr_mult`` groups scale along). With
``accumulative_counts=k`` a step is k micro-batches, their mean loss is the step's loss, and the
optimizer wrapper's AMP context and loss scaling apply as in training. No hook runs (no
checkpoint, no logging, no lr schedule).

The loss is smoothed with a bias-corrected exponential moving average (``--smooth`` is the
weight of the newest loss); the test stops early when the smoothed loss exceeds ``--diverge``
times the best smoothed loss so far, or the loss is not finite.

Suggested lr: where the smoothed loss falls fastest, i.e. the most negative slope of the
smoothed loss against log(lr), ignoring the first tenth of the steps (at most 10) and the last
one, as Lightning does; unlike Lightning, only up to the lowest smoothed loss (a fall after a
spike past the minimum is no place to train). The lr of the lowest smoothed loss is printed too
(a tenth of it is the other common rule of thumb). The suggestion is printed once, as a train command
ready to paste that ends in ``--cfg-options ... optim_wrapper.optimizer.lr=3.2e-03``.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import types
from collections.abc import Mapping
from typing import Any

from libai.config import Config, parse_value
from libai.utils.errors import ConfigError, TrainingError

__all__ = ["LR_KEY", "check_args", "find_lr", "lr_at", "plot", "range_test", "suggest"]

LR_KEY = "optim_wrapper.optimizer.lr"


def check_args(args: Any) -> None:
    """One clear error for each bad value."""
    if not (args.start_lr > 0 and math.isfinite(args.start_lr)):
        raise ConfigError(f"--start-lr must be a positive number, got {args.start_lr}.")
    if not (args.end_lr > args.start_lr and math.isfinite(args.end_lr)):
        raise ConfigError(f"--end-lr ({args.end_lr}) must be larger than --start-lr "
                          f"({args.start_lr}).")
    if args.num_iters < 5:
        raise ConfigError(f"--num-iters must be at least 5, got {args.num_iters}.")
    if not args.diverge > 1:
        raise ConfigError(f"--diverge must be > 1 (a multiple of the best smoothed loss), "
                          f"got {args.diverge}.")
    if not 0 < args.smooth <= 1:
        raise ConfigError(f"--smooth must be in (0, 1], got {args.smooth}.")
    if not args.out.lower().endswith((".png", ".pdf", ".svg", ".jpg", ".jpeg")):
        raise ConfigError(f"--out must end in .png, .pdf, .svg or .jpg, got '{args.out}'.")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("lr_find runs in one process; start it with python, not torchrun.")


# ----------------------------------------------------------------------------- the test
def lr_at(step: int, num_iters: int, start: float, end: float) -> float:
    """The lr of step ``step`` (0-based): ``start`` at the first step, ``end`` at the last."""
    return start * (end / start) ** (step / (num_iters - 1))


def set_lr(optim_wrapper: Any, lr: float, ratios: list[float]) -> None:
    """Set every parameter group's lr to ``lr * ratio`` (a tensor lr is filled in place, as the
    param schedulers do: graph mode reads that very tensor)."""
    import torch

    for group, ratio in zip(optim_wrapper.param_groups, ratios):
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr * ratio)
        else:
            group["lr"] = lr * ratio


def group_ratios(optim_wrapper: Any) -> list[float]:
    """Each group's lr relative to the optimizer's default lr (1.0 for plain groups)."""
    base = float(optim_wrapper.defaults.get("lr") or 0.0)
    ratios = []
    for group in optim_wrapper.param_groups:
        lr = float(group["lr"])
        ratios.append(lr / base if base > 0 and lr > 0 else 1.0)
    return ratios


def batches(loader: Any):
    """The loader's batches, pass after pass (the sampler told each new epoch)."""
    epoch = 0
    while True:
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ConfigError("train_dataloader yields no batch: lower batch_size or check "
                              "the dataset.")
        epoch += 1


def range_test(runner: Any, args: Any) -> dict[str, Any]:
    """Run the test; returns lrs, raw and smoothed losses and why it stopped."""
    wrapper = runner.optim_wrapper
    accumulate = int(getattr(wrapper, "accumulative_counts", 1) or 1)
    ratios = group_ratios(wrapper)
    runner.model.train()
    wrapper.initialize_count_status(runner.model, 0, args.num_iters * accumulate)
    data = batches(runner.train_dataloader)
    beta = 1.0 - args.smooth
    avg, best = 0.0, math.inf
    lrs: list[float] = []
    losses: list[float] = []
    smoothed: list[float] = []
    stop = f"reached --end-lr after {args.num_iters} steps"
    report_every = max(1, args.num_iters // 10)
    for step in range(args.num_iters):
        lr = lr_at(step, args.num_iters, args.start_lr, args.end_lr)
        set_lr(wrapper, lr, ratios)
        total = 0.0
        for _ in range(accumulate):
            log_vars = runner.run_train_step(next(data))
            if "loss" not in log_vars:
                raise TrainingError(f"the training step returned no 'loss' to follow (keys: "
                                    f"{', '.join(map(str, log_vars))}).")
            total += float(log_vars["loss"])
        loss = total / accumulate
        lrs.append(lr)
        losses.append(loss)
        if not math.isfinite(loss):
            smoothed.append(math.nan)
            stop = f"the loss became {loss} at step {step + 1} (lr {lr:.2e})"
            break
        avg = beta * avg + (1 - beta) * loss
        value = avg / (1 - beta ** (step + 1))  # bias correction: no pull towards 0 at first
        smoothed.append(value)
        best = min(best, value)
        if (step + 1) % report_every == 0:
            print(f"step {step + 1:>4}/{args.num_iters}  lr {lr:.2e}  loss {loss:.4g}  "
                  f"smoothed {value:.4g}", flush=True)
        if step > 0 and value > args.diverge * best:
            stop = (f"diverged at step {step + 1} (lr {lr:.2e}): smoothed loss {value:.4g} > "
                    f"{args.diverge:g} x best {best:.4g}")
            break
    return dict(lrs=lrs, losses=losses, smoothed=smoothed, stop=stop, best=best)


def suggest(lrs: list[float], smoothed: list[float]) -> tuple[int, int]:
    """(index of the steepest descent, index of the lowest smoothed loss).

    The slope is that of the smoothed loss against log(lr); the first tenth of the points (at
    most 10, as Lightning's ``skip_begin``) and the last point are left out, as is anything
    after a non-finite loss. Unlike Lightning, only the points up to the lowest smoothed loss
    are searched (when there are at least two): a noisy curve falls steeply after a spike
    too, at an lr already past the minimum.
    """
    import numpy as np

    n = next((i for i, v in enumerate(smoothed) if not math.isfinite(v)), len(smoothed))
    skip_begin, skip_end = min(10, n // 10), 1
    if n - skip_begin - skip_end < 3:
        raise TrainingError(
            f"only {n} finite loss value(s) before the test stopped: too few for a suggestion. "
            f"Lower --start-lr, raise --num-iters or --diverge.")
    x = np.log10(np.asarray(lrs[:n], dtype=float))
    y = np.asarray(smoothed[:n], dtype=float)
    lowest = int(np.argmin(y))
    grad = np.gradient(y, x)
    # on the way down to the lowest loss: a spike's fall after it is no place to train at
    stop = min(lowest + 1, n - skip_end) if lowest - skip_begin >= 2 else n - skip_end
    steepest = int(np.argmin(grad[skip_begin:stop])) + skip_begin
    return steepest, lowest


# --------------------------------------------------------------------------------- plot
def plot(result: dict[str, Any], steepest: int, lowest: int, args: Any,
         title: str) -> None:
    """Loss and smoothed loss against the lr (log scale), the suggestion marked."""
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    from matplotlib.figure import Figure

    lrs, losses, smoothed = result["lrs"], result["losses"], result["smoothed"]
    fig = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.plot(lrs, losses, color="tab:blue", alpha=0.3, linewidth=1, label="loss")
    ax.plot(lrs, smoothed, color="tab:blue", linewidth=2, label="smoothed loss")
    lr = lrs[steepest]
    ax.axvline(lr, color="tab:red", linestyle="--", linewidth=1)
    ax.plot([lr], [smoothed[steepest]], "o", color="tab:red",
            label=f"suggested lr {lr:.1e} (steepest descent)")
    ax.plot([lrs[lowest]], [smoothed[lowest]], "v", color="tab:gray",
            label=f"lowest smoothed loss at lr {lrs[lowest]:.1e}")
    finite = np.asarray([v for v in smoothed if math.isfinite(v)], dtype=float)
    # from the lowest smoothed loss to a little above the first: the divergence leaves the top
    raw = np.asarray([v for v in losses if math.isfinite(v)], dtype=float)
    low = float(min(finite.min(), np.percentile(raw, 2)))
    high = float(min(finite.max(), low + 1.3 * (max(finite[0], low) - low) + 0.05 * abs(low)))
    pad = 0.08 * (high - low) if high > low else 0.1 * abs(high) + 1e-3
    ax.set_ylim(low - pad, high + pad)
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("training loss")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    folder = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(folder, exist_ok=True)
    fig.savefig(args.out)


# --------------------------------------------------------------------------------- main
def option_words(options: Mapping[str, Any] | None) -> list[str]:
    """``--cfg-options`` values back as words that parse to the same values."""
    words = []
    for key, value in (options or {}).items():
        text = value if isinstance(value, str) and parse_value(value) == value else repr(value)
        words.append(f"{key}={text}")
    return words


def build_runner(cfg: Config, work_dir: str) -> Any:
    """A Runner in ``work_dir`` with every hook off: nothing runs but the steps."""
    from libai.hooks import DEFAULT_HOOKS
    from libai.runner import Runner

    cfg.work_dir = work_dir
    cfg.default_hooks = {name: None for name in DEFAULT_HOOKS}
    cfg.custom_hooks = []
    cfg.resume = False
    cfg.log_level = "WARNING"
    return Runner.from_cfg(cfg)


def _load_weights(runner: Any) -> None:
    """The config's ``load_from`` weights, as the runner loads them before evaluating."""
    runner.checkpointer.restore(weights_only=True)


def close_run_log() -> None:
    """Drop the file handler the Runner gave the libai logger (its file is about to go)."""
    import logging

    logger = logging.getLogger("libai")
    for handler in list(logger.handlers):
        if isinstance(handler, logging.FileHandler):
            logger.removeHandler(handler)
            handler.close()


def find_lr(cfg: Config, start_lr: float = 1e-7, end_lr: float = 10.0, num_iters: int = 100,
            diverge: float = 4.0, smooth: float = 0.05, out: str = "lr_find.png",
            amp: bool = False) -> dict[str, Any]:
    """Run the range test on ``cfg`` (its ``--cfg-options`` already merged) in a temporary work
    dir that is deleted afterwards, and draw the plot to ``out``.

    Args:
        cfg: The config; ``optim_wrapper.optimizer`` must be a dict.
        start_lr: The lr of the first step. Defaults to 1e-7.
        end_lr: The lr of the last step. Defaults to 10.0.
        num_iters: Optimizer steps at most. Defaults to 100.
        diverge: Stop when the smoothed loss exceeds this many times the best. Defaults to 4.0.
        smooth: Weight of the newest loss in the moving average. Defaults to 0.05.
        out: The plot file. Defaults to "lr_find.png".
        amp: Mixed precision, as ``libai train --amp``. Defaults to False.

    Returns:
        ``range_test``'s result (``lrs``, ``losses``, ``smoothed``, ``stop``) with ``lr`` (the
        suggestion), ``steepest`` and ``lowest`` (indices into ``lrs``) and ``lr_key`` (the
        ``--cfg-options`` key that sets the lr, with a ``+`` where the config has none).

    Raises:
        ConfigError: A bad value or a config without an optimizer dict.
    """
    args = types.SimpleNamespace(start_lr=start_lr, end_lr=end_lr, num_iters=num_iters,
                                 diverge=diverge, smooth=smooth, out=out, amp=amp)
    check_args(args)
    wrapper_cfg = cfg.get("optim_wrapper")
    if not isinstance(wrapper_cfg, Mapping) or not isinstance(wrapper_cfg.get("optimizer"),
                                                             Mapping):
        raise ConfigError("lr_find needs optim_wrapper=dict(optimizer=dict(type=..., lr=...)) "
                          "in the config, to set the lr of the suggestion.")
    if amp:
        import torch

        wrapper = dict(wrapper_cfg)
        wrapper["type"] = "AmpOptimWrapper"
        wrapper.setdefault("dtype", "float16" if torch.cuda.is_available() else "bfloat16")
        cfg.optim_wrapper = wrapper
    lr_key = LR_KEY if "lr" in wrapper_cfg["optimizer"] else "+" + LR_KEY

    work_dir = tempfile.mkdtemp(prefix="libai_lr_find_")
    try:
        runner = build_runner(cfg, work_dir)
        _load_weights(runner)  # load_from, as training would start from it
        print(f"LR range test: {num_iters} steps, lr {start_lr:.1e} -> "
              f"{end_lr:.1e} ({runner.optim_wrapper!r})", flush=True)
        result = range_test(runner, args)
        del runner
    finally:
        close_run_log()
        shutil.rmtree(work_dir, ignore_errors=True)

    steepest, lowest = suggest(result["lrs"], result["smoothed"])
    name = os.path.splitext(os.path.basename(cfg.filename or "config"))[0]
    plot(result, steepest, lowest, args, f"LR range test: {name}")
    return {**result, "lr": result["lrs"][steepest], "steepest": steepest, "lowest": lowest,
            "lr_key": lr_key}
