"""Train a model from a config file.

    libai train configs/digits_mlp.py [--work-dir DIR] [--amp] [--graph] [--resume [PATH]]
        [--move-damaged]
        [--load-from PATH] [--fast-dev-run] [--cfg-options key=value ...] [--debug]

Under torchrun (``torchrun --nproc_per_node 2 tools/train.py CONFIG``) each process trains one
shard with DistributedDataParallel.

Exit status: 0 done; 2 a mistake in the input (one line); 128 + N stopped by signal N (130
Ctrl-C, 143 SIGTERM, 138 SIGUSR1), while training once the checkpoint of the current iteration is
written; a second Ctrl-C exits at once without it (docs/reliability.md).

The same as ``python tools/train.py`` in a checkout.
"""

import argparse
from collections.abc import Mapping
from contextlib import contextmanager

import torch

from libai.cli.configs import add_config_arguments, load_run_config
from libai.runner import Runner
from libai.utils.dist import destroy_dist
from libai.utils.errors import ConfigError
from libai.utils.signals import InterruptedBeforeTraining


def parse_args(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description="Train a model from a libai config.")
    parser.add_argument("config", help="config file (.py, .yaml or .json)")
    parser.add_argument("--work-dir", help="folder for logs and checkpoints (overrides work_dir)")
    parser.add_argument("--amp", action="store_true",
                        help="mixed precision: float16 on CUDA, bfloat16 on CPU")
    parser.add_argument("--graph", action="store_true",
                        help="graph mode: the training step compiled (compile=True); "
                             "with --amp, compiled with mixed precision")
    parser.add_argument("--resume", nargs="?", const=True, default=None, metavar="PATH",
                        help="resume from the latest checkpoint in the work dir, or from PATH")
    parser.add_argument("--allow-changes", nargs="+", metavar="KEY", default=None,
                        help="on resume, accept these schedule changes (e.g. train_cfg.max_iters)")
    parser.add_argument("--move-damaged", action="store_true",
                        help="with --resume: if every checkpoint in the work dir is damaged, rename "
                             "them to *.damaged (every byte kept) and start fresh instead of stopping")
    parser.add_argument("--load-from", metavar="PATH", help="load weights only (no resume)")
    parser.add_argument("--fast-dev-run", nargs="?", const=2, type=int, default=0, metavar="N",
                        help="run N (default 2) train iterations and eval batches; save nothing")
    add_config_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None, prog=None):
    args = parse_args(argv, prog)
    cfg = load_run_config(args)
    if args.amp or args.graph:
        _apply_flags(cfg, args.amp, args.graph)
    if args.resume is not None:
        cfg.resume = args.resume
    if args.allow_changes or args.move_damaged:
        options = dict(cfg.get("resume_options") or {})
        if args.allow_changes:
            options["allow_changes"] = args.allow_changes
        if args.move_damaged:
            options["damaged"] = "rename"
        cfg.resume_options = options
    if args.load_from:
        cfg.load_from = args.load_from
    with _before_training():
        runner = Runner.from_cfg(cfg, fast_dev_run=args.fast_dev_run)
    try:
        # the test set is built before training: a mistake in it must not cost the whole run
        # (a dry run too: it is there to find such mistakes, and it tests 2 batches)
        with _before_training():
            test_loop = runner.test_loop
        runner.train()
        if test_loop is not None:
            runner.test()
    finally:
        runner.close()  # the work dir is free for the next run



def _apply_flags(cfg, amp: bool, graph: bool) -> None:
    """--amp: mixed precision (AmpOptimWrapper's dtype). --graph: the compile switch on
    (``compile=``), with the graph-mode options the optim_wrapper section gives (``compile``,
    ``on_failure``, ``verify_steps``...: moved to ``compile=``); a GraphOptimWrapper config is on
    already."""
    from libai.model.graph.options import GRAPH_KEYS, wrapper_switch

    if not isinstance(cfg.get("optim_wrapper"), Mapping):
        raise ConfigError(
            f"--amp and --graph set options of optim_wrapper, so it must be a dict, got a built "
            f"{type(cfg.get('optim_wrapper')).__name__}. Write optim_wrapper=dict(optimizer=..., "
            f"type='AmpOptimWrapper', dtype=...) and compile=True in the config instead.")
    wrapper = dict(cfg.optim_wrapper)
    named_graph = wrapper_switch(wrapper) is not None  # GraphOptimWrapper: graph mode is on
    if amp:
        wrapper["type"] = wrapper["type"] if named_graph else "AmpOptimWrapper"
        wrapper.setdefault("dtype", "float16" if torch.cuda.is_available() else "bfloat16")
    if graph and not named_graph:
        options = {k: wrapper.pop(k) for k in ("compile", *GRAPH_KEYS) if k in wrapper}
        given = cfg.get("compile")
        switch = {**(given if isinstance(given, Mapping) else {}),
                  **(options.pop("compile", None) or {}), **options}
        cfg.compile = switch or True
    cfg.optim_wrapper = wrapper


@contextmanager
def _before_training():
    """Ctrl-C while the run is built (before train() installs its handler): nothing was trained,
    so the line says so, not the usual "checkpoints written so far are complete"."""
    try:
        yield
    except InterruptedBeforeTraining:
        raise
    except KeyboardInterrupt:
        raise InterruptedBeforeTraining() from None


teardown = destroy_dist  # run by run_cli once main has returned: the runner is released
