"""Show a config's model and what one training step of it costs, without training.

    python tools/model_summary.py CONFIG [--cfg-options KEY=VALUE ...] [--depth N] [--no-flops]
        [--device cpu|cuda] [--debug]

Builds the model, takes one batch from the train data loader and runs one training step on it
(forward + backward, no optimizer step) inside ``torch.utils.flop_counter.FlopCounterMode``;
prints the summary table (module, type, parameters, trainable, output shape, FLOPs) and the
step's FLOPs, forward and backward. Writes nothing (no work dir, no log, no checkpoint; a text
dataset may fill its own token cache, as training would). ``--no-flops`` prints the parameter
table only, without building the data loader.

The same table and FLOPs count open every training run (ThroughputHook).
"""

from __future__ import annotations

import argparse
import contextlib
from functools import partial
from typing import Any

import torch

from libai.config import Config, add_cfg_options_argument
from libai.utils.cli import run_cli
from libai.utils.dist import DataParallel
from libai.utils.errors import ConfigError


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
    from torch.utils.flop_counter import FlopCounterMode

    from libai.hooks.throughput_hook import batch_reader
    from libai.model import make_train_step
    from libai.model.summary import flops_by_row, record_output_shapes

    own = getattr(model, "train_step", None)
    step = partial(own, forward=model) if own is not None else make_train_step(model, model, device)
    reader = batch_reader(batch)
    samples, tokens = reader(batch) if reader is not None else (0, 0)
    model.train()
    counter = FlopCounterMode(display=False)
    wrapper = BackwardOnly(counter)
    with record_output_shapes(model, depth) as shapes, counter:
        step(batch, wrapper)
    total = counter.get_total_flops()
    forward = wrapper.forward_flops if wrapper.forward_flops is not None else total
    rows = flops_by_row(model, wrapper.forward_counts or counter.get_flop_counts(), depth)
    rows.update({name: 0 for name in shapes if name not in rows})  # ran, no counted operation
    return dict(total=total, forward=forward, backward=total - forward, rows=rows,
                shapes=dict(shapes), samples=samples, tokens=tokens)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Print a config's model summary and the FLOPs of one training step.")
    parser.add_argument("config", help="config file (.py, .yaml, .yml, .json) or libai::<path>")
    add_cfg_options_argument(parser)
    parser.add_argument("--depth", type=int, default=1,
                        help="module levels in the table: 1 = top-level modules (default)")
    parser.add_argument("--no-flops", action="store_true",
                        help="the parameter table only: no data loader, no step")
    parser.add_argument("--device", default=None,
                        help="where the step runs: cpu, cuda, cuda:N (default: the config's "
                             "device, else CUDA when present)")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = parser.parse_args(argv)
    if args.depth < 1:
        raise ConfigError(f"--depth must be >= 1, got {args.depth}.")

    from libai.model.summary import format_count, format_flops, format_summary, summarize_model
    from libai.runner import build, env, imports

    cfg = Config.fromfile(args.config)
    cfg.merge_from_options(args.cfg_options or {})
    build.validate_top_level(cfg)
    imports.import_custom_modules(cfg.get("custom_imports"), cfg.filename)
    seed = env.seed_everything(dict(cfg.get("randomness") or {}))
    device = env.select_device(args.device or cfg.get("device"))
    model = build.build_model(cfg.model).to(device)

    counted: dict[str, Any] | None = None
    if not args.no_flops:
        if cfg.get("train_dataloader") is None:
            raise ConfigError("The config has no train_dataloader to take a batch from; "
                              "use --no-flops for the parameter table alone.")
        loader = build.build_loader(cfg.train_dataloader, "train_dataloader", seed, DataParallel(),
                                    False)
        build.check_model_fits_data(model, loader, "train_dataloader")
        batch = next(iter(loader))
        counted = count_step_flops(model, batch, device, args.depth)
        model.zero_grad(set_to_none=True)

    summary = summarize_model(
        model, depth=args.depth,
        output_shapes=counted["shapes"] if counted else None,
        flops=counted["rows"] if counted else None,
        total_flops=counted["forward"] if counted else None)
    print(format_summary(summary))
    if counted is None:
        return 0
    total, samples, tokens = counted["total"], counted["samples"], counted["tokens"]
    if not total:
        print("FLOPs per training step: unknown (FlopCounterMode counted no matrix product, "
              "convolution or attention)")
        return 0
    batch_text = f"{samples} samples" + (f", {tokens} tokens" if tokens else "") if samples \
        else "one batch"
    print(f"FLOPs per training step: {format_flops(total)} = forward "
          f"{format_flops(counted['forward'])} + backward {format_flops(counted['backward'])} "
          f"({batch_text} from train_dataloader; {total:,} FLOPs)")
    per = [f"{format_flops(total / samples)} per sample"] if samples else []
    per += [f"{format_flops(total / tokens)} per token"] if tokens else []
    if per:
        print(f"That is {', '.join(per)}; {format_count(summary.total_params)} parameters.")
    return 0


if __name__ == "__main__":
    run_cli(main)
