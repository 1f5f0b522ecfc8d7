"""Show a config's model and what one training step of it costs, without training.

    python tools/model_summary.py CONFIG [--cfg-options KEY=VALUE ...] [--depth N] [--no-flops]
        [--device cpu|cuda] [--debug]

The same as ``libai summary ...``; from Python, :func:`libai.analysis.model_summary.model_summary`.
"""

from libai.analysis.model_summary import BackwardOnly, count_step_flops, model_summary  # noqa: F401
from libai.cli.model_summary import main  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
