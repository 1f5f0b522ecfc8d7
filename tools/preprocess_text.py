"""Tokenise raw text into the indexed format that the BERT and GPT datasets read.

    python tools/preprocess_text.py INPUT [INPUT ...] --output-prefix PREFIX
        (--tokenizer PATH | --train-tokenizer {wordpiece,bpe} --vocab-size N [--cased])
        [--format {auto,text,jsonl}] [--json-key KEY] [--workers N] [--append-eod]
        [--no-progress] [--debug]

The same as ``libai preprocess-text ...``; the command is :mod:`libai.cli.preprocess_text`.
"""

from libai.cli.preprocess_text import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
