"""Generate text from a causal LM checkpoint (GPT-2, Llama).

    libai generate CONFIG CHECKPOINT --prompt "ROMEO:" [--max-new-tokens 100]
        [--greedy | --temperature 0.8 --top-k 50 --top-p 0.95] [--num-samples 1] [--seed 0]
        [--stop STR ...] [--tokenizer PATH] [--cfg-options key=value ...] [--debug]
    libai generate CONFIG CHECKPOINT --prompt-file prompts.txt --greedy --stop "."
    libai generate CONFIG CHECKPOINT --instruction "Which play is this passage from? ..." --greedy

The model is built from CONFIG and loaded with the CHECKPOINT's weights; the tokenizer is the
one the config's dataset uses (built into the cache on first use), or --tokenizer.

--prompt-file holds prompts one a line (UTF-8, blank lines skipped), generated in one batch
left-padded with the end-of-text id, which the attention mask hides: each continues as alone.
A row ends at the end-of-text token; --stop cuts the printed text at the first of its strings.

--instruction is for an instruction-tuned model: the text is wrapped in the template of the
config's InstructionDataset (the user turn and the assistant header, tokenized as in training),
and only the response is printed, up to the end-of-text token.

The same as ``python tools/generate.py`` in a checkout.
"""

import argparse
import math
import os

import torch

from libai.checkpoint import checkpoint_weights, load_model_state
from libai.cli.configs import resolve_config
from libai.config import Config, add_cfg_options_argument
from libai.data.text import TextCorpus, TextTokenizer, encode_prompt, load_corpus, resolve_tokenizer
from libai.data.text.instruction import DEFAULT_TEMPLATE
from libai.registry import MODELS
from libai.runner.imports import import_custom_modules
from libai.utils.errors import ConfigError


def parse_args(argv=None, prog=None):
    parser = argparse.ArgumentParser(
        prog=prog, description="Generate text from a causal LM checkpoint (GPT-2, Llama).")
    parser.add_argument("config", help="the config the checkpoint was trained with")
    parser.add_argument("checkpoint", help="checkpoint file (.pth) with the model weights")
    parser.add_argument("--prompt", default="", help="text to continue (default: empty)")
    parser.add_argument("--prompt-file", metavar="FILE",
                        help="several prompts, one a line (UTF-8; blank lines skipped), "
                             "generated in one batch")
    parser.add_argument("--instruction",
                        help="an instruction for an instruction-tuned model: wrapped in the "
                             "config's template; prints only the response")
    parser.add_argument("--system", help="with --instruction: a system turn before it")
    parser.add_argument("--max-new-tokens", type=int, default=100)
    parser.add_argument("--greedy", action="store_true", help="always take the likeliest token")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="divides the logits before sampling; 0 is greedy")
    parser.add_argument("--top-k", type=int, default=None, help="sample from the k likeliest")
    parser.add_argument("--top-p", type=float, default=None,
                        help="sample from the smallest set of tokens with this total probability")
    parser.add_argument("--num-samples", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    parser.add_argument("--stop", action="append", default=[], metavar="STR",
                        help="cut the continuation at the first STR (repeatable)")
    parser.add_argument("--tokenizer", help="tokenizer.json / vocab.txt (default: the config's)")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    add_cfg_options_argument(parser)
    return parser.parse_args(argv)


_LOADERS = ("test_dataloader", "val_dataloader", "train_dataloader")


def _datasets(cfg):
    """The dataset configs of the config's data loaders, test first, as plain dicts."""
    for key in _LOADERS:
        dataset = (cfg.get(key) or {}).get("dataset") or {}
        if hasattr(dataset, "to_dict"):
            dataset = dataset.to_dict()
        if isinstance(dataset, dict):
            yield dataset


def config_tokenizer(cfg) -> TextTokenizer:
    """The tokenizer of the first data loader in the config that names one: a text corpus
    (``corpus=``, pretraining) or a fine-tuning dataset's ``tokenizer=``
    (:func:`~libai.data.text.resolve_tokenizer`)."""
    for dataset in _datasets(cfg):
        if "corpus" in dataset:
            corpus = dataset["corpus"]
            return (corpus if isinstance(corpus, TextCorpus) else load_corpus(**corpus)).tokenizer
        if dataset.get("tokenizer") is not None:
            return resolve_tokenizer(dataset["tokenizer"])
    raise ConfigError("The config's data loaders name no text corpus or tokenizer; pass "
                      "--tokenizer PATH.")


def config_template(cfg):
    """The template of the config's InstructionDataset (its default when it names none)."""
    for dataset in _datasets(cfg):
        if dataset.get("type") == "InstructionDataset" or "template" in dataset:
            return dataset.get("template", DEFAULT_TEMPLATE)
    raise ConfigError("--instruction needs a config whose data loaders read an "
                      "InstructionDataset (its template frames the instruction), e.g. "
                      "configs/gpt2_tiny_instruct.py; use --prompt to continue plain text.")


def read_prompts(path: str) -> list[str]:
    """The prompts of ``--prompt-file``: one a line, blank lines skipped, decoded as UTF-8."""
    if not os.path.isfile(path):
        raise ConfigError(f"--prompt-file {path}: no such file.")
    with open(path, "rb") as f:
        data = f.read().removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
    prompts = []
    for number, line in enumerate(data.splitlines(), 1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"--prompt-file {path} line {number} is not UTF-8 text (byte "
                              f"0x{line[e.start]:02x} at column {e.start + 1}): save the file as "
                              f"UTF-8.") from None
        if text.strip():
            prompts.append(text)
    if not prompts:
        raise ConfigError(f"--prompt-file {path} has no prompts (one a line).")
    return prompts


def _check_text(flag: str, text: str) -> None:
    try:  # Python hands argv bytes that are not UTF-8 over as lone surrogates (surrogateescape)
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConfigError(f"{flag} is not UTF-8 text (byte 0x{ord(text[e.start]) & 0xff:02x} at "
                          f"character {e.start + 1}): pass it in UTF-8.") from None


def _check_args(args) -> None:
    if args.max_new_tokens < 1 or args.num_samples < 1:
        raise ConfigError("--max-new-tokens and --num-samples must be at least 1.")
    if not math.isfinite(args.temperature) or args.temperature < 0:
        raise ConfigError(f"--temperature must be a finite number >= 0 (0 always takes the "
                          f"likeliest token, like --greedy), got {args.temperature:g}.")
    if args.top_k is not None and args.top_k < 1:
        raise ConfigError(f"--top-k must be at least 1, got {args.top_k}.")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise ConfigError(f"--top-p is a total probability in (0, 1], got {args.top_p:g}.")
    given = [f for f, v in (("--prompt", args.prompt), ("--prompt-file", args.prompt_file),
                            ("--instruction", args.instruction)) if v]
    if len(given) > 1:
        raise ConfigError(f"Give one of --prompt (text to continue), --prompt-file (one prompt a "
                          f"line) or --instruction (for an instruction-tuned model), not both "
                          f"{given[0]} and {given[1]}.")
    if args.system is not None and args.instruction is None:
        raise ConfigError("--system goes with --instruction.")
    for flag, text in (("--prompt", args.prompt), ("--instruction", args.instruction),
                       ("--system", args.system), *(("--stop", s) for s in args.stop)):
        _check_text(flag, text or "")


def _left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, None if bool(mask.all()) else mask


def _continuation(tokenizer, prompt: list[int], new: list[int], stops: list[str]) -> str:
    """The prompt and its continuation as text, cut at the first stop string after the prompt."""
    text, head = tokenizer.decode(prompt + new), len(tokenizer.decode(prompt))
    cuts = [i for i in (text.find(s, head) for s in stops if s) if i >= 0]
    return text[: min(cuts)] if cuts else text


def main(argv=None, prog=None):
    args = parse_args(argv, prog)
    _check_args(args)
    texts = read_prompts(args.prompt_file) if args.prompt_file else [args.prompt]
    cfg = Config.fromfile(resolve_config(args.config))
    import_custom_modules(cfg.get("custom_imports"), cfg.filename)  # the Runner does it too
    cfg.merge_from_options(args.cfg_options or {})
    template = config_template(cfg) if args.instruction is not None else None
    model = MODELS.build(cfg.model.to_dict(), path="model")
    if not hasattr(model, "generate"):
        raise ConfigError(f"{type(model).__name__} cannot generate text: use a causal LM "
                          f"config (e.g. configs/gpt2_tiny.py, configs/llama_tiny.py).")
    load_model_state(model, checkpoint_weights(args.checkpoint))  # a sharded one too
    tokenizer = TextTokenizer.load(args.tokenizer) if args.tokenizer else config_tokenizer(cfg)
    if tokenizer.vocab_size != model.vocab_size:
        raise ConfigError(f"The tokenizer has {tokenizer.vocab_size} tokens but the model "
                          f"{model.vocab_size}: use the tokenizer the model was trained with.")
    pad = tokenizer.eod_id if tokenizer.eod_id is not None else 0
    if template is not None:
        prompts = [encode_prompt(tokenizer, template, args.instruction, args.system)]
    else:  # an empty prompt starts a document
        prompts = [tokenizer.encode(text) or [pad] for text in texts]
    rows = [p for p in prompts for _ in range(args.num_samples)]
    ids, mask = _left_pad(rows, pad)  # (B, L): every prompt, num_samples times
    model.eval()
    with torch.no_grad():
        out = model.generate(
            ids, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
            top_p=args.top_p, do_sample=not args.greedy, eos_token_id=tokenizer.eod_id,
            generator=torch.Generator().manual_seed(args.seed), attention_mask=mask,
        )
    for i, (prompt, row) in enumerate(zip(rows, out[:, ids.shape[1]:].tolist())):
        p, n = divmod(i, args.num_samples)
        labels = ([f"prompt {p + 1}"] if len(prompts) > 1 else []) + (
            [f"sample {n + 1}"] if args.num_samples > 1 else [])
        if labels:
            print(f"--- {', '.join(labels)}")
        if tokenizer.eod_id in row:  # a finished row: its end-of-text and the copies after it
            row = row[: row.index(tokenizer.eod_id)]
        # the response alone after an instruction; else the prompt and its continuation
        print(_continuation(tokenizer, [] if template is not None else prompt, row, args.stop))
