"""Learning-rate range test: train a few steps with an exponentially growing lr, plot the loss.

    python tools/lr_find.py CONFIG [--cfg-options key=value ...] [--start-lr 1e-7] [--end-lr 10]
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
(a tenth of it is the other common rule of thumb). The suggestion is printed as a train command
and as an option ready to paste: ``--cfg-options optim_wrapper.optimizer.lr=3.2e-03``.

The same as ``libai lr-find ...``; from Python, :func:`libai.tuning.find_lr`.
"""

from libai.cli.lr_find import main, parse_args  # noqa: F401
from libai.tuning.lr_find import find_lr, lr_at, suggest  # noqa: F401  (the Python API)
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
