"""The ``libai`` command: one subcommand per tool, each a parser around the package's API.

    libai train CONFIG [...]          # = python tools/train.py CONFIG [...]
    python -m libai train CONFIG      # the same without the console script

``libai COMMAND --help`` lists a command's flags. A CONFIG is a file, or the name of a shipped
config (``bert_tiny``, ``bert_tiny.py``, ``libai::bert_tiny.py``) when no such file exists here
(:func:`libai.cli.configs.resolve_config`). Each command lives in ``libai/cli/<module>.py`` with
``build_parser(prog)`` and ``main(argv, prog)``; this module imports only the one it runs, so
``libai --help`` starts without torch.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from functools import partial
from typing import NoReturn

__all__ = ["COMMANDS", "main"]

# name: (module in libai.cli, one line of help); the order of `libai --help`
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("train", "train a model from a config"),
    "test": ("test", "evaluate a checkpoint on the test set"),
    "print-config": ("print_config", "print a config with its bases and overrides merged"),
    "predict": ("predict", "label new text with a fine-tuned checkpoint"),
    "generate": ("generate", "generate text from a GPT checkpoint"),
    "convert": ("convert_checkpoint", "convert checkpoints: Hugging Face <-> libai, sharded"),
    "preprocess-text": ("preprocess_text", "turn text or JSON lines into token files"),
    "summary": ("model_summary", "a model's parameters and one step's FLOPs, no training"),
    "lr-find": ("lr_find", "learning-rate range test: suggests an lr"),
    "sweep": ("sweep", "hyperparameter sweep with Optuna: grid, random, bayes"),
    "analyze-logs": ("analyze_logs", "curves, iteration times and summaries of runs"),
    "browse": ("browse_dataset", "the data as the model sees it: images or token tables"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [
        "usage: libai [-h] [--version] COMMAND [ARGS ...]",
        "",
        "A config-driven training engine for PyTorch. Commands (libai COMMAND --help for each):",
        "",
        *(f"  {name:<{width}}  {help_text}" for name, (_, help_text) in COMMANDS.items()),
        "",
        "CONFIG arguments take a file or the name of a shipped config: libai train bert_tiny.",
        "`libai COMMAND ...` is the same as `python tools/<module>.py ...` in a checkout.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run ``libai COMMAND ARGS...``; exits with the command's status (2 for a usage error)."""
    from libai.utils.cli import EXIT_USER_ERROR, run_cli
    from libai.utils.suggest import did_you_mean

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        sys.exit(0 if args else EXIT_USER_ERROR)
    if args[0] == "--version":
        from libai.version import __version__

        print(f"libai {__version__}")
        sys.exit(0)
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        hint = did_you_mean(name, COMMANDS) or f" Commands: {', '.join(COMMANDS)}."
        print(f"error: unknown command '{name}'.{hint} See libai --help.", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    module = importlib.import_module(f"libai.cli.{COMMANDS[name][0]}")
    run_cli(partial(module.main, prog=f"libai {name}"), rest,
            teardown=getattr(module, "teardown", None))
