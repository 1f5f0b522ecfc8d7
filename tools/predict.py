"""Predict labels of new text with a fine-tuned checkpoint.

    python tools/predict.py CONFIG CHECKPOINT "a passage" [...] [--file new.csv] [--out F]

The same as ``libai predict ...``; the command is :mod:`libai.cli.predict`.
"""

from libai.cli.predict import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
