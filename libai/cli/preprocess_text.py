"""Tokenise raw text into the indexed format that the BERT and GPT datasets read.

    libai preprocess-text INPUT [INPUT ...] --output-prefix PREFIX
        (--tokenizer PATH | --train-tokenizer {wordpiece,bpe} --vocab-size N [--cased])
        [--format {auto,text,jsonl}] [--json-key KEY] [--workers N] [--append-eod]
        [--no-progress] [--debug]

Inputs are text files (one sentence per line, a blank line between documents) or JSON lines
(one document per line, its text under --json-key). Writes PREFIX.bin, PREFIX.idx and the
tokenizer beside them (PREFIX.tokenizer.json, and PREFIX.vocab.txt for WordPiece); open the
result with ``corpus=dict(source="PREFIX")`` in a config.

The same as ``python tools/preprocess_text.py`` in a checkout.
"""

import argparse
import time

from libai.data.text import (
    INPUT_FORMATS,
    TOKENIZER_KINDS,
    TextTokenizer,
    preprocess_corpus,
    read_documents,
)


def parse_args(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description="Tokenise text files into PREFIX.bin/.idx.")
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="text or JSON-lines files")
    parser.add_argument(
        "--output-prefix", required=True, metavar="PREFIX", help="output path without .bin/.idx"
    )
    tok = parser.add_mutually_exclusive_group(required=True)
    tok.add_argument("--tokenizer", metavar="PATH", help="tokenizer.json, vocab.txt or folder")
    tok.add_argument(
        "--train-tokenizer",
        choices=TOKENIZER_KINDS,
        help="train a tokenizer of this kind on the inputs first",
    )
    parser.add_argument("--vocab-size", type=int, help="vocabulary size for --train-tokenizer")
    parser.add_argument(
        "--cased",
        action="store_true",
        help="WordPiece: keep case and accents (default: lower-case)",
    )
    parser.add_argument(
        "--format",
        default="auto",
        choices=INPUT_FORMATS,
        help="input format (auto: .jsonl/.json/.ndjson are JSON lines)",
    )
    parser.add_argument("--json-key", default="text", help="key of the text in JSON lines")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="tokenising processes (default: 1 below 32 MiB, else one per core)",
    )
    parser.add_argument(
        "--append-eod",
        action="store_true",
        help="end each document with the end-of-document token (GPT)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 0:
        parser.error(f"--workers must be 0 or 1 (tokenise in this process) or more, got "
                     f"{args.workers}")
    if args.train_tokenizer and args.vocab_size is None:
        parser.error("--train-tokenizer needs --vocab-size")
    if args.tokenizer and (args.vocab_size is not None or args.cased):
        parser.error("--vocab-size and --cased go with --train-tokenizer, not --tokenizer")
    return args


def training_text(args):
    for doc in read_documents(args.inputs, args.format, args.json_key):
        yield from doc


def main(argv=None, prog=None):
    args = parse_args(argv, prog)
    if args.tokenizer:
        tokenizer = TextTokenizer.load(args.tokenizer)
    else:
        start = time.perf_counter()
        # a callable: WordPiece training reads the text twice, streaming each time
        tokenizer = TextTokenizer.train(
            lambda: training_text(args),
            args.train_tokenizer,
            args.vocab_size,
            lowercase=not args.cased,
        )
        print(
            f"Trained a {tokenizer.kind} tokenizer ({tokenizer.vocab_size:,} tokens) in "
            f"{time.perf_counter() - start:.1f} s"
        )
    stats = preprocess_corpus(
        args.inputs,
        args.output_prefix,
        tokenizer,
        fmt=args.format,
        json_key=args.json_key,
        workers=args.workers,
        append_eod=args.append_eod,
        progress=not args.no_progress,
    )
    skipped = (
        f" ({stats['skipped_docs']:,} empty documents skipped)" if stats["skipped_docs"] else ""
    )
    print(
        f"Wrote {stats['docs']:,} documents, {stats['sentences']:,} sentences, "
        f"{stats['tokens']:,} tokens ({stats['dtype']}){skipped} in {stats['seconds']:.1f} s "
        f"with {stats['workers']} worker(s):"
    )
    for path in stats["files"]:
        print(f"  {path}")

