"""Generate text from a GPT checkpoint.

    libai generate CONFIG CHECKPOINT --prompt "ROMEO:" [--max-new-tokens 100]
        [--greedy | --temperature 0.8 --top-k 50 --top-p 0.95] [--num-samples 1] [--seed 0]
        [--tokenizer PATH] [--cfg-options key=value ...] [--debug]
    libai generate CONFIG CHECKPOINT --instruction "Which play is this passage from? ..." --greedy

The model is built from CONFIG and loaded with the CHECKPOINT's weights; the tokenizer is the
one the config's dataset uses (built into the cache on first use), or --tokenizer.

--instruction is for an instruction-tuned model: the text is wrapped in the template of the
config's InstructionDataset (the user turn and the assistant header, tokenized as in training),
and only the response is printed, up to the end-of-text token.

The same as ``python tools/generate.py`` in a checkout.
"""

import argparse

import torch

from libai.checkpoint import load_checkpoint, load_model_state
from libai.cli.configs import resolve_config
from libai.config import Config, add_cfg_options_argument
from libai.data.text import TextCorpus, TextTokenizer, encode_prompt, load_corpus, resolve_tokenizer
from libai.data.text.instruction import DEFAULT_TEMPLATE
from libai.registry import MODELS
from libai.runner.imports import import_custom_modules
from libai.utils.errors import ConfigError


def parse_args(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description="Sample text from a GPT checkpoint.")
    parser.add_argument("config", help="the config the checkpoint was trained with")
    parser.add_argument("checkpoint", help="checkpoint file (.pth) with the model weights")
    parser.add_argument("--prompt", default="", help="text to continue (default: empty)")
    parser.add_argument("--instruction",
                        help="an instruction for an instruction-tuned model: wrapped in the "
                             "config's template; prints only the response")
    parser.add_argument("--system", help="with --instruction: a system turn before it")
    parser.add_argument("--max-new-tokens", type=int, default=100)
    parser.add_argument("--greedy", action="store_true", help="always take the likeliest token")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=None, help="sample from the k likeliest")
    parser.add_argument("--top-p", type=float, default=None,
                        help="sample from the smallest set of tokens with this total probability")
    parser.add_argument("--num-samples", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
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


def _check_args(args) -> None:
    if args.max_new_tokens < 1 or args.num_samples < 1:
        raise ConfigError("--max-new-tokens and --num-samples must be at least 1.")
    if not args.temperature > 0:  # also NaN
        raise ConfigError(f"--temperature must be > 0, got {args.temperature:g} (use --greedy to "
                          f"always take the likeliest token).")
    if args.top_k is not None and args.top_k < 1:
        raise ConfigError(f"--top-k must be at least 1, got {args.top_k}.")
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise ConfigError(f"--top-p is a total probability in (0, 1], got {args.top_p:g}.")
    if args.instruction is not None and args.prompt:
        raise ConfigError("Give --prompt (text to continue) or --instruction (a question for an "
                          "instruction-tuned model), not both.")
    if args.system is not None and args.instruction is None:
        raise ConfigError("--system goes with --instruction.")


def main(argv=None, prog=None):
    args = parse_args(argv, prog)
    _check_args(args)
    cfg = Config.fromfile(resolve_config(args.config))
    import_custom_modules(cfg.get("custom_imports"), cfg.filename)  # the Runner does it too
    cfg.merge_from_options(args.cfg_options or {})
    template = config_template(cfg) if args.instruction is not None else None
    model = MODELS.build(cfg.model.to_dict(), path="model")
    if not hasattr(model, "generate"):
        raise ConfigError(f"{type(model).__name__} cannot generate text: use a GPT config "
                          f"(e.g. configs/gpt2_tiny.py).")
    load_model_state(model, load_checkpoint(args.checkpoint).get("state_dict"))
    tokenizer = TextTokenizer.load(args.tokenizer) if args.tokenizer else config_tokenizer(cfg)
    if tokenizer.vocab_size != model.vocab_size:
        raise ConfigError(f"The tokenizer has {tokenizer.vocab_size} tokens but the model "
                          f"{model.vocab_size}: use the tokenizer the model was trained with.")
    if template is not None:
        ids = encode_prompt(tokenizer, template, args.instruction, args.system)
    else:
        ids = tokenizer.encode(args.prompt) or [tokenizer.eod_id]  # empty: starts a document
    prompt = torch.tensor([ids] * args.num_samples)  # (N, S)
    model.eval()
    with torch.no_grad():
        out = model.generate(
            prompt, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
            top_p=args.top_p, do_sample=not args.greedy, eos_token_id=tokenizer.eod_id,
            generator=torch.Generator().manual_seed(args.seed),
        )
    for i, row in enumerate(out.tolist()):
        if args.num_samples > 1:
            print(f"--- sample {i + 1}")
        if template is not None:  # the response alone, up to its end-of-text id
            row = row[len(ids):]
            row = row[: row.index(tokenizer.eod_id)] if tokenizer.eod_id in row else row
        print(tokenizer.decode(row))
