"""Train a model from a config file.

    python tools/train.py configs/digits_mlp.py [--work-dir DIR] [--amp] [--graph] [--resume [PATH]]
        [--move-damaged]
        [--load-from PATH] [--fast-dev-run] [--cfg-options key=value ...] [--debug]

Under torchrun (``torchrun --nproc_per_node 2 tools/train.py CONFIG``) each process trains one
shard with DistributedDataParallel.

Exit status: 0 done; 2 a mistake in the input (one line); 130 Ctrl-C; 128 + N stopped by signal N
(143 SIGTERM, 138 SIGUSR1) once the checkpoint of the current iteration is written
(docs/reliability.md).

The same as ``libai train ...``; the command is :mod:`libai.cli.train`.
"""

from libai.cli.train import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli
from libai.utils.dist import destroy_dist

if __name__ == "__main__":
    run_cli(main, teardown=destroy_dist)  # once main has returned: the runner is released
