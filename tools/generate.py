"""Generate text from a causal LM checkpoint (GPT-2, Llama).

    python tools/generate.py CONFIG CHECKPOINT --prompt "ROMEO:" [--max-new-tokens 100]
        [--greedy | --temperature 0.8 --top-k 50 --top-p 0.95] [--num-samples 1] [--seed 0]
        [--stop STR ...] [--tokenizer PATH] [--cfg-options key=value ...] [--debug]
    python tools/generate.py CONFIG CHECKPOINT --prompt-file prompts.txt --greedy

--prompt-file holds several prompts, one a line, generated in one left-padded batch.
The model is built from CONFIG and loaded with the CHECKPOINT's weights; the tokenizer is the
one the config's dataset uses (built into the cache on first use), or --tokenizer.

The same as ``libai generate ...``; the command is :mod:`libai.cli.generate`.
"""

from libai.cli.generate import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
