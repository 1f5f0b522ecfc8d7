"""Convert checkpoints: Hugging Face folders <-> libai, sharded (FSDP / tensor parallel) <-> one file.

    python tools/convert_checkpoint.py hf2libai HF_DIR OUT.pth [--debug]
    python tools/convert_checkpoint.py libai2hf CONFIG CHECKPOINT OUT_DIR
        [--cfg-options key=value ...] [--debug]
    python tools/convert_checkpoint.py sharded2file CHECKPOINT OUT.pth
    python tools/convert_checkpoint.py file2sharded CHECKPOINT OUT.pth

``hf2libai`` reads ``config.json`` + ``model.safetensors`` (or ``pytorch_model.bin``), writes
``{"state_dict": ...}`` to OUT.pth (train from it with ``load_from=OUT.pth``) and prints the
``model = dict(...)`` to put in a config. A folder can also be given to ``load_from`` directly.
``libai2hf`` builds the model of CONFIG, loads CHECKPOINT's weights (strict) and writes a folder
that ``transformers``' ``from_pretrained`` loads.
``sharded2file`` gathers the weights of a sharded checkpoint (``iter_N.pth`` + ``iter_N.dcp/``) into
one file, with its loop position and config, for ``tools/test.py``, ``load_from`` or any
one-process reader; ``file2sharded`` does the opposite for the weights. (A sharded checkpoint
resumes at any number of processes without conversion: ``--resume`` reshards it.)

The same as ``libai convert ...``; the command is :mod:`libai.cli.convert_checkpoint`.
"""

from libai.cli.convert_checkpoint import main, parse_args  # noqa: F401
from libai.utils.cli import run_cli

if __name__ == "__main__":
    run_cli(main)
