"""Convert checkpoints: Hugging Face folders <-> libai, sharded (FSDP / tensor parallel) <-> one file.

    libai convert hf2libai HF_DIR OUT.pth [--debug]
    libai convert libai2hf CONFIG CHECKPOINT OUT_DIR [--tokenizer PATH | --no-tokenizer]
        [--cfg-options key=value ...] [--debug]
    libai convert sharded2file CHECKPOINT OUT.pth
    libai convert file2sharded CHECKPOINT OUT.pth

``hf2libai`` reads ``config.json`` + ``model.safetensors`` (or ``pytorch_model.bin``), writes
``{"state_dict": ...}`` to OUT.pth (train from it with ``load_from=OUT.pth``) and prints the
``model = dict(...)`` to put in a config. A folder can also be given to ``load_from`` directly.
``libai2hf`` builds the model of CONFIG, loads CHECKPOINT's weights (strict) and writes a folder
that ``transformers``' ``from_pretrained`` loads: a classifier's ``id2label`` from the class names
the checkpoint holds (``meta["dataset_meta"]["classes"]``, LABEL_i without them), and the
tokenizer of the config's dataset (or ``--tokenizer``) for ``AutoTokenizer``; where the config's
does not fit the model (another size or kind), the weights alone, with a line saying why.
``sharded2file`` gathers the weights of a sharded checkpoint (``iter_N.pth`` + ``iter_N.dcp/``) into
one file, with its loop position and config, for ``tools/test.py``, ``load_from`` or any
one-process reader; ``file2sharded`` does the opposite for the weights. (A sharded checkpoint
needs no conversion for libai itself: ``--resume`` reshards it to any number of processes, and
generate, predict, test, ``libai2hf`` and ``load_from`` read it as it is.)

The same as ``python tools/convert_checkpoint.py`` in a checkout.
"""

import argparse
import os

import torch

from libai.checkpoint import (
    checkpoint_weights,
    load_checkpoint,
    load_model_state,
    model_state_for_saving,
    save_checkpoint,
    strip_prefixes,
)
from libai.checkpoint.sharded import check_sharded, save_weights_sharded
from libai.cli.configs import resolve_config
from libai.cli.generate import config_tokenizer
from libai.config import Config, add_cfg_options_argument
from libai.data.text import TextTokenizer
from libai.model import from_hf_pretrained, save_hf_pretrained
from libai.model.zoo.hf import check_hf_export
from libai.registry import MODELS
from libai.runner.data_check import model_with_classes
from libai.runner.imports import import_custom_modules
from libai.utils.errors import CheckpointError, ConfigError, DataError


def parse_args(argv=None, prog=None):
    parser = argparse.ArgumentParser(prog=prog, description="Convert weights: Hugging Face <-> libai.")
    sub = parser.add_subparsers(dest="command", required=True)
    hf2libai = sub.add_parser("hf2libai", help="Hugging Face folder -> libai checkpoint")
    hf2libai.add_argument("hf_dir", help="folder with config.json and the weights")
    hf2libai.add_argument("out", help="libai checkpoint to write (.pth)")
    libai2hf = sub.add_parser("libai2hf", help="libai config + checkpoint -> Hugging Face folder")
    libai2hf.add_argument("config", help="the libai config the checkpoint was trained with")
    libai2hf.add_argument("checkpoint", help="libai checkpoint (its 'state_dict' is used)")
    libai2hf.add_argument("out_dir", help="folder to write config.json and model.safetensors to")
    tokenizer = libai2hf.add_mutually_exclusive_group()
    tokenizer.add_argument("--tokenizer", help="tokenizer.json / vocab.txt / folder to write with "
                                               "the model (default: the config's dataset's)")
    tokenizer.add_argument("--no-tokenizer", action="store_true",
                           help="write the model alone, without tokenizer files")
    add_cfg_options_argument(libai2hf)
    to_file = sub.add_parser("sharded2file", help="sharded checkpoint -> one file (weights)")
    to_sharded = sub.add_parser("file2sharded", help="one-file checkpoint -> sharded (weights)")
    for p in (to_file, to_sharded):
        p.add_argument("checkpoint", help="the checkpoint to convert (.pth)")
        p.add_argument("out", help="checkpoint to write (.pth; a sharded one gets a .dcp folder)")
    for p in (parser, hf2libai, libai2hf, to_file, to_sharded):
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
    cfg = Config.fromfile(resolve_config(args.config))
    import_custom_modules(cfg.get("custom_imports"), cfg.filename)  # the Runner does it too
    cfg.merge_from_options(args.cfg_options or {})
    ckpt = load_checkpoint(args.checkpoint)
    # num_classes=None: the checkpoint's labels (libai.runner.data_check)
    meta = ((ckpt.get("meta") or {}).get("dataset_meta") or {}) if isinstance(ckpt, dict) else {}
    model_cfg = model_with_classes(cfg.model.to_dict(), meta.get("classes") and {
        "classes": meta["classes"], "task": "classification",
        "section": f"the checkpoint {args.checkpoint}"})
    with torch.device("meta"):  # no init: every tensor comes from the checkpoint
        model = MODELS.build(model_cfg, path="model")
    check_hf_export(model)  # one line naming the families that export, before any work
    model.to_empty(device="cpu")
    load_model_state(model, checkpoint_weights(args.checkpoint, ckpt), strict=True)
    tokenizer, tokenizer_note = _export_tokenizer(args, cfg)
    names, names_note = _label_names(ckpt, model, args.checkpoint)
    try:
        written = save_hf_pretrained(model, args.out_dir, label_names=names, tokenizer=tokenizer)
    except ConfigError as e:  # nothing written yet
        if tokenizer is None or args.tokenizer:  # not about the tokenizer, or the one asked for
            raise
        # the config's dataset's tokenizer is not this model's (a model imported from Hugging
        # Face without its tokenizer files, fine-tuned under a shipped config): the weights alone
        written = save_hf_pretrained(model, args.out_dir, label_names=names)
        reason = str(e).split("; pass the tokenizer")[0]
        tokenizer_note = (f"no tokenizer written: the config's dataset's does not fit the model "
                          f"({reason}); to add one, run again with --tokenizer PATH")
    print(f"wrote {args.out_dir}: {', '.join(written)} ({type(model).__name__})")
    for note in (names_note, tokenizer_note):
        if note:
            print(note)


def _export_tokenizer(args, cfg):
    """The tokenizer to write (--tokenizer, else the config's dataset's), and a line saying so."""
    if args.no_tokenizer:
        return None, "no tokenizer written (--no-tokenizer)"
    if args.tokenizer:
        return TextTokenizer.load(args.tokenizer), f"tokenizer: {args.tokenizer}"
    try:
        tokenizer = config_tokenizer(cfg)
    except (ConfigError, DataError) as e:  # none named, or not readable here: write the model
        reason = str(e).split("; pass --tokenizer")[0].rstrip(".")  # the fix is said below
        return None, (f"no tokenizer written ({reason}); to add one, run again with --tokenizer "
                      f"PATH (a tokenizer.json, vocab.txt or a folder holding one)")
    return tokenizer, f"tokenizer: the config's ({tokenizer.kind}, {tokenizer.vocab_size} tokens)"


def _label_names(ckpt, model, path):
    """A classifier's class names from the checkpoint's meta, and a line when there are none."""
    num_classes = model.config.get("num_classes")
    if num_classes is None:  # not a classifier
        return None, ""
    meta = ckpt.get("meta") if isinstance(ckpt.get("meta"), dict) else {}
    classes = (meta.get("dataset_meta") or {}).get("classes")
    fallback = f"LABEL_0..LABEL_{num_classes - 1}"
    if not classes:
        return None, (f"id2label: {fallback} ({path} holds no class names in "
                      f"meta.dataset_meta.classes)")
    if len(classes) != num_classes:
        return None, (f"id2label: {fallback} (the checkpoint names {len(classes)} classes, the "
                      f"model has num_classes={num_classes})")
    return list(classes), f"id2label: {dict(enumerate(classes))}"


def _keep(ckpt):
    """What carries over besides the weights: where training stood and the config."""
    return {k: ckpt[k] for k in ("meta", "loop") if k in ckpt}


def sharded_to_file(args):
    ckpt = load_checkpoint(args.checkpoint)
    if "sharded" not in ckpt:
        raise CheckpointError(f"'{args.checkpoint}' is not a sharded checkpoint (it holds its "
                              f"weights itself); use it as it is.")
    folder = check_sharded(args.checkpoint, ckpt["sharded"])
    weights = checkpoint_weights(args.checkpoint, ckpt)  # every rank's shards, whole tensors
    save_checkpoint({**_keep(ckpt), "state_dict": weights}, args.out)
    print(f"wrote {args.out}: {len(weights)} tensors from {ckpt['sharded']['world_size']} "
          f"process(es)' shards in {folder}")


def file_to_sharded(args):
    ckpt = load_checkpoint(args.checkpoint)
    if "sharded" in ckpt:
        raise CheckpointError(f"'{args.checkpoint}' is sharded already.")
    weights = strip_prefixes(ckpt.get("state_dict", ckpt))
    listing = save_weights_sharded(weights, args.out)
    save_checkpoint({**_keep(ckpt), "state_dict": {}, "sharded": listing}, args.out)
    print(f"wrote {args.out} and {listing['folder']}/: {len(weights)} tensors")


def main(argv=None, prog=None):
    args = parse_args(argv, prog)
    commands = {"hf2libai": hf_to_libai, "libai2hf": libai_to_hf, "sharded2file": sharded_to_file,
                "file2sharded": file_to_sharded}
    commands[args.command](args)

