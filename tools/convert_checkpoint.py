"""Convert checkpoints: Hugging Face folders <-> libai, sharded (FSDP / tensor parallel) <-> one file.

    python tools/convert_checkpoint.py hf2libai HF_DIR OUT.pth [--debug]
    python tools/convert_checkpoint.py libai2hf CONFIG CHECKPOINT OUT_DIR [--tokenizer PATH]
        [--cfg-options key=value ...] [--debug]
    python tools/convert_checkpoint.py sharded2file CHECKPOINT OUT.pth
    python tools/convert_checkpoint.py file2sharded CHECKPOINT OUT.pth

The same as ``libai convert ...``; the command is :mod:`libai.cli.convert_checkpoint`.
"""

from libai.cli.convert_checkpoint import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
