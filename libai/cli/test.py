"""Evaluate a checkpoint on the test set (or predict and dump the outputs).

    libai test CONFIG CHECKPOINT [--dump preds.pt] [--work-dir DIR]
        [--cfg-options key=value ...] [--debug]

The run's folder (its log, config.py and test scalars) goes beside the checkpoint, into the work
dir that holds it, unless --work-dir (or --cfg-options work_dir=...) names another.

The same as ``python tools/test.py`` in a checkout.
"""

import argparse
import os

from libai.cli.configs import add_config_arguments, load_run_config
from libai.hooks import LoggerHook
from libai.runner import Runner
from libai.runner.preflight import check_input_path
from libai.utils.dist import destroy_dist
from libai.utils.paths import check_output_path
from libai.utils.run_layout import RUN_FOLDER


def parse_args(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description="Evaluate a checkpoint with a libai config.")
    parser.add_argument("config", help="config file (.py, .yaml or .json)")
    parser.add_argument("checkpoint", help="checkpoint file to load weights from")
    parser.add_argument("--work-dir", help="folder for the logs (default: the checkpoint's "
                                           "folder, where it is writable)")
    parser.add_argument("--dump", metavar="FILE",
                        help="also save the model outputs for every test sample (.pt or .jsonl)")
    add_config_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None, prog=None):
    args = parse_args(argv, prog)
    cfg = load_run_config(args)
    check_input_path("checkpoint", args.checkpoint)  # named as the user gave it
    if not args.work_dir and not {"work_dir", "+work_dir"} & set(args.cfg_options or {}):
        cfg.work_dir = beside(args.checkpoint, cfg.get("work_dir"))
    cfg.load_from = args.checkpoint
    cfg.resume = False
    if args.dump:
        check_output_path(args.dump, "--dump")  # checked before the evaluation, not after it
        hooks = list(cfg.get("custom_hooks") or [])
        hooks.append(dict(type="DumpPredictionsHook", path=args.dump))
        cfg.custom_hooks = hooks
    runner = Runner.from_cfg(cfg)
    try:
        metrics = runner.test()
    finally:
        runner.close()  # the work dir is free for the next run
    # the LoggerHook has logged them ("Test (iteration N)  test/...: ..."): once is enough
    if not any(isinstance(h, LoggerHook) for h in runner.hooks):
        runner.logger.info("Test metrics: "
                           + "  ".join(f"{k}: {v:.4f}" for k, v in metrics.items()))


def beside(checkpoint: str, default: str | None) -> str | None:
    """The work dir of a test of ``checkpoint``: the folder holding it (the work dir above it
    when that folder is a run folder), or ``default`` where that folder is not writable."""
    folder = os.path.dirname(os.path.abspath(checkpoint.rstrip("/\\") or checkpoint))
    if RUN_FOLDER.match(os.path.basename(folder)):  # a checkpoint kept in its run's folder
        folder = os.path.dirname(folder)
    return folder if os.access(folder, os.W_OK) else default



teardown = destroy_dist  # run by run_cli once main has returned: the runner is released
