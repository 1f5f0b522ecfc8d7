"""Convert BERT / GPT-2 weights between Hugging Face folders and libai checkpoints.

    python tools/convert_checkpoint.py hf2libai HF_DIR OUT.pth [--debug]
    python tools/convert_checkpoint.py libai2hf CONFIG CHECKPOINT OUT_DIR
        [--cfg-options key=value ...] [--debug]

``hf2libai`` reads ``config.json`` + ``model.safetensors`` (or ``pytorch_model.bin``), writes
``{"state_dict": ...}`` to OUT.pth (train from it with ``load_from=OUT.pth``) and prints the
``model = dict(...)`` to put in a config. A folder can also be given to ``load_from`` directly.
``libai2hf`` builds the model of CONFIG, loads CHECKPOINT's weights (strict) and writes a folder
that ``transformers``' ``from_pretrained`` loads.
"""

import argparse
import os

import torch

from libai.checkpoint import (
    load_checkpoint,
    load_model_state,
    model_state_for_saving,
    save_checkpoint,
)
from libai.config import Config, add_cfg_options_argument
from libai.model import from_hf_pretrained, save_hf_pretrained
from libai.registry import MODELS
from libai.runner.imports import import_custom_modules
from libai.utils.cli import run_cli


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Convert weights: Hugging Face <-> libai.")
    sub = parser.add_subparsers(dest="command", required=True)
    hf2libai = sub.add_parser("hf2libai", help="Hugging Face folder -> libai checkpoint")
    hf2libai.add_argument("hf_dir", help="folder with config.json and the weights")
    hf2libai.add_argument("out", help="libai checkpoint to write (.pth)")
    libai2hf = sub.add_parser("libai2hf", help="libai config + checkpoint -> Hugging Face folder")
    libai2hf.add_argument("config", help="the libai config the checkpoint was trained with")
    libai2hf.add_argument("checkpoint", help="libai checkpoint (its 'state_dict' is used)")
    libai2hf.add_argument("out_dir", help="folder to write config.json and model.safetensors to")
    add_cfg_options_argument(libai2hf)
    for p in (parser, hf2libai, libai2hf):
        p.add_argument("--debug", action="store_true", help="show full tracebacks")
    return parser.parse_args(argv)


def hf_to_libai(args):
    model = from_hf_pretrained(args.hf_dir)  # checks that the weights fill the model exactly
    model_cfg = {"type": type(model).__name__, **model.config}
    meta = {"converted_from": os.path.abspath(args.hf_dir), "model": model_cfg}
    save_checkpoint({"state_dict": model_state_for_saving(model), "meta": meta}, args.out)
    fields = "".join(f"    {k}={v!r},\n" for k, v in model_cfg.items())
    print(f"wrote {args.out}; put this model in your config:\nmodel = dict(\n{fields})")


def libai_to_hf(args):
    cfg = Config.fromfile(args.config)
    import_custom_modules(cfg.get("custom_imports"), cfg.filename)  # the Runner does it too
    cfg.merge_from_options(args.cfg_options or {})
    with torch.device("meta"):  # no init: every tensor comes from the checkpoint
        model = MODELS.build(cfg.model.to_dict(), path="model")
    model.to_empty(device="cpu")
    ckpt = load_checkpoint(args.checkpoint)
    load_model_state(model, ckpt.get("state_dict", ckpt), strict=True)
    save_hf_pretrained(model, args.out_dir)
    print(f"wrote {args.out_dir}/config.json and model.safetensors ({type(model).__name__})")


def main(argv=None):
    args = parse_args(argv)
    (hf_to_libai if args.command == "hf2libai" else libai_to_hf)(args)


if __name__ == "__main__":
    run_cli(main)
