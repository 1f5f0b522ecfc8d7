"""Generate text from a GPT checkpoint.

    libai generate CONFIG CHECKPOINT --prompt "ROMEO:" [--max-new-tokens 100]
        [--greedy | --temperature 0.8 --top-k 50 --top-p 0.95] [--num-samples 1] [--seed 0]
        [--tokenizer PATH] [--cfg-options key=value ...] [--debug]

The model is built from CONFIG and loaded with the CHECKPOINT's weights; the tokenizer is the
one the config's dataset uses (built into the cache on first use), or --tokenizer.

The same as ``python tools/generate.py`` in a checkout.
"""

import argparse

import torch

from libai.checkpoint import load_checkpoint, load_model_state
from libai.cli.configs import resolve_config
from libai.config import Config, add_cfg_options_argument
from libai.data.text import TextCorpus, TextTokenizer, load_corpus
from libai.registry import MODELS
from libai.runner.imports import import_custom_modules
from libai.utils.errors import ConfigError


def parse_args(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description="Sample text from a GPT checkpoint.")
    parser.add_argument("config", help="the config the checkpoint was trained with")
    parser.add_argument("checkpoint", help="checkpoint file (.pth) with the model weights")
    parser.add_argument("--prompt", default="", help="text to continue (default: empty)")
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


def config_tokenizer(cfg) -> TextTokenizer:
    """The tokenizer of the first data loader in the config that names a text corpus."""
    for key in ("test_dataloader", "val_dataloader", "train_dataloader"):
        dataset = (cfg.get(key) or {}).get("dataset") or {}
        if isinstance(dataset, dict) and "corpus" in dataset:
            corpus = dataset["corpus"]
            if not isinstance(corpus, TextCorpus):
                corpus = load_corpus(**(corpus.to_dict() if hasattr(corpus, "to_dict") else corpus))
            return corpus.tokenizer
    raise ConfigError("The config's data loaders name no text corpus; pass --tokenizer PATH.")


def main(argv=None, prog=None):
    args = parse_args(argv, prog)
    if args.max_new_tokens < 1 or args.num_samples < 1:
        raise ConfigError("--max-new-tokens and --num-samples must be at least 1.")
    cfg = Config.fromfile(resolve_config(args.config))
    import_custom_modules(cfg.get("custom_imports"), cfg.filename)  # the Runner does it too
    cfg.merge_from_options(args.cfg_options or {})
    model = MODELS.build(cfg.model.to_dict(), path="model")
    if not hasattr(model, "generate"):
        raise ConfigError(f"{type(model).__name__} cannot generate text: use a GPT config "
                          f"(e.g. configs/gpt2_tiny.py).")
    load_model_state(model, load_checkpoint(args.checkpoint).get("state_dict"))
    tokenizer = TextTokenizer.load(args.tokenizer) if args.tokenizer else config_tokenizer(cfg)
    if tokenizer.vocab_size != model.vocab_size:
        raise ConfigError(f"The tokenizer has {tokenizer.vocab_size} tokens but the model "
                          f"{model.vocab_size}: use the tokenizer the model was trained with.")
    ids = tokenizer.encode(args.prompt) or [tokenizer.eod_id]  # an empty prompt starts a document
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
        print(tokenizer.decode(row))

