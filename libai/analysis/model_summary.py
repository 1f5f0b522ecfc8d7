"""Show a config's model and what one training step of it costs, without training.

    libai summary CONFIG [--cfg-options KEY=VALUE ...] [--depth N] [--no-flops]
        [--device cpu|cuda] [--debug]

Builds the model, takes one batch from the train data loader and runs one training step on it
(forward + backward, no optimizer step) inside ``torch.utils.flop_counter.FlopCounterMode``;
prints the summary table (module, type, parameters, trainable, output shape, FLOPs) and the
step's FLOPs, forward and backward. Writes nothing (no work dir, no log, no checkpoint; a text
dataset may fill its own token cache, as training would). ``--no-flops`` prints the parameter
table only, without building the data loader.

The same table and FLOPs count open every training run (ThroughputHook). From Python:
:func:`model_summary`; ``libai summary`` and ``python tools/model_summary.py`` print it.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

import torch

from libai.config import Config
from libai.utils.dist import DataParallel
from libai.utils.errors import ConfigError

__all__ = ["BackwardOnly", "count_step_flops", "model_summary"]


class BackwardOnly:
    """What a train step needs from an optim wrapper, with backward and without the update.

    Records the FLOPs counted before backward (in total and per module), so that the step's
    count splits into forward and backward.
    """

    plain_forward = True
    accumulative_counts = 1

    def __init__(self, counter: Any) -> None:
        self.counter = counter
        self.forward_flops: int | None = None
        self.forward_counts: dict[str, dict[Any, int]] = {}

    def optim_context(self, model: Any) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def update_params(self, loss: torch.Tensor, **kwargs: Any) -> None:
        self.forward_flops = self.counter.get_total_flops()
        self.forward_counts = self.counter.get_flop_counts()
        loss.backward()


def count_step_flops(model: torch.nn.Module, batch: Any, device: torch.device,
                     depth: int = 1) -> dict[str, Any]:
    """One training step of ``model`` on ``batch`` (the runner's step: preprocessing, forward,
    loss, backward; no optimizer step) inside FlopCounterMode.

    Returns:
        ``total``, ``forward`` and ``backward`` FLOPs, ``rows`` (forward FLOPs per summary row:
        the counter attributes forward operations to modules exactly, backward ones only
        approximately), ``shapes`` (output shape per summary row) and the batch's ``samples``
        and ``tokens``.
    """
    from libai.hooks.throughput_hook import batch_reader
    from libai.model import make_train_step
    from libai.model.summary import flops_by_row, record_output_shapes

    own = getattr(model, "train_step", None)
    step = partial(own, forward=model) if own is not None else make_train_step(model, model, device)
    reader = batch_reader(batch)
    samples, tokens = reader(batch) if reader is not None else (0, 0)
    model.train()
    from libai.model.flops import flop_counter

    counter = flop_counter()  # attention on every SDPA kernel, grouped-query included
    wrapper = BackwardOnly(counter)
    with record_output_shapes(model, depth) as shapes, counter:
        step(batch, wrapper)
    if counter.failure is not None:  # the tool's one job: say so rather than undercount
        raise RuntimeError(f"FLOPs unknown: counting the step failed in {counter.failure}")
    total = counter.get_total_flops()
    forward = wrapper.forward_flops if wrapper.forward_flops is not None else total
    rows = flops_by_row(model, wrapper.forward_counts or counter.get_flop_counts(), depth)
    rows.update({name: 0 for name in shapes if name not in rows})  # ran, no counted operation
    return dict(total=total, forward=forward, backward=total - forward, rows=rows,
                shapes=dict(shapes), samples=samples, tokens=tokens)


def model_summary(cfg: Config, depth: int = 1, flops: bool = True,
                  device: str | None = None) -> tuple[Any, dict[str, Any] | None]:
    """Build ``cfg``'s model and, with ``flops``, count one training step on a train batch.

    Args:
        cfg: The config, overrides merged.
        depth: Module levels in the table: 1 = top-level modules. Defaults to 1.
        flops: Build the train data loader and count one step. Defaults to True.
        device: Where the step runs. Defaults to None (the config's device, else CUDA when
            present).

    Returns:
        ``(summary, counted)``: :func:`libai.model.summary.summarize_model`'s summary and
        :func:`count_step_flops`'s dict (None without ``flops``).
    """
    if depth < 1:
        raise ConfigError(f"--depth must be >= 1, got {depth}.")

    from libai.model.summary import summarize_model
    from libai.runner import batch_fit, build, env, imports
    from libai.runner.data_check import check_data_files, model_with_classes

    build.validate_top_level(cfg)
    imports.import_custom_modules(cfg.get("custom_imports"), cfg.filename)
    seed = env.seed_everything(dict(cfg.get("randomness") or {}))
    device = env.select_device(device or cfg.get("device"))
    # num_classes=None: the count of the data's labels, as training takes it
    model_cfg = model_with_classes(cfg.model, check_data_files(cfg))
    model = build.build_model(model_cfg).to(device)

    counted: dict[str, Any] | None = None
    if flops:
        if cfg.get("train_dataloader") is None:
            raise ConfigError("The config has no train_dataloader to take a batch from; "
                              "use --no-flops for the parameter table alone.")
        section = batch_fit.loader_cfg(cfg.train_dataloader,  # batch_size='auto' resolved
                                       batch_fit.resolve(cfg, device, 1))
        loader = build.build_loader(section, "train_dataloader", seed, DataParallel(), False)
        build.check_model_fits_data(model, loader, "train_dataloader")
        batch = next(iter(loader))
        counted = count_step_flops(model, batch, device, depth)
        model.zero_grad(set_to_none=True)

    summary = summarize_model(
        model, depth=depth,
        output_shapes=counted["shapes"] if counted else None,
        flops=counted["rows"] if counted else None,
        total_flops=counted["forward"] if counted else None)
    return summary, counted
