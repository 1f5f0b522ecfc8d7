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

The same as ``libai summary ...``; from Python, :func:`libai.analysis.model_summary.model_summary`.
"""

from libai.analysis.model_summary import BackwardOnly, count_step_flops, model_summary  # noqa: F401
from libai.cli.model_summary import main  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
