"""Evaluate a checkpoint on the test set (or predict and dump the outputs).

    libai test CONFIG CHECKPOINT [--dump preds.pt] [--work-dir DIR]
        [--cfg-options key=value ...] [--debug]

The same as ``python tools/test.py`` in a checkout.
"""

import argparse

from libai.cli.configs import load_config
from libai.config import add_cfg_options_argument
from libai.runner import Runner
from libai.runner.preflight import check_input_path
from libai.utils.dist import destroy_dist
from libai.utils.paths import check_output_path


def parse_args(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description="Evaluate a checkpoint with a libai config.")
    parser.add_argument("config", help="config file (.py, .yaml or .json)")
    parser.add_argument("checkpoint", help="checkpoint file to load weights from")
    parser.add_argument("--work-dir", help="folder for the logs (overrides work_dir)")
    parser.add_argument("--dump", metavar="FILE",
                        help="also save the model outputs for every test sample (.pt or .jsonl)")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    add_cfg_options_argument(parser)
    return parser.parse_args(argv)


def main(argv=None, prog=None):
    args = parse_args(argv, prog)
    cfg = load_config(args.config, args.cfg_options)
    if args.work_dir:
        cfg.work_dir = args.work_dir
    check_input_path("checkpoint", args.checkpoint)  # named as the user gave it
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
    runner.logger.info("Test metrics: " + "  ".join(f"{k}: {v:.4f}" for k, v in metrics.items()))



teardown = destroy_dist  # run by run_cli once main has returned: the runner is released
