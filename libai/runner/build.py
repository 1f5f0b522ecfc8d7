"""Build the runner's parts from config sections. Each function takes one section and returns
the part; none of them keeps state. Parts given as objects instead of dicts are used as they are."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from libai.registry import HOOKS, LOOPS, MODELS
from libai.utils.dist import DataParallel
from libai.utils.errors import ConfigError, LibaiError
from libai.utils.suggest import did_you_mean

__all__ = [
    "TOP_LEVEL_KEYS",
    "TOP_LEVEL_DEFAULTS",
    "validate_top_level",
    "build_model",
    "build_loader",
    "build_eval_sets",
    "build_loop",
    "build_hooks",
    "check_model_fits_data",
]

# Every key a runner config may have, with what it is for (printed when a key is unknown).
TOP_LEVEL_KEYS = {
    "model": "the model: dict(type=..., ...) or an nn.Module",
    "work_dir": "folder for logs and checkpoints",
    "experiment_name": "name shown in the log; defaults to the config file name",
    "train_dataloader": "dict(dataset=..., sampler=..., batch_size=..., ...)",
    "val_dataloader": "a data loader dict, or {name: data loader dict} for several sets",
    "test_dataloader": "a data loader dict, or {name: data loader dict}",
    "train_cfg": "the training loop: dict(type='IterBasedTrainLoop', max_iters=...)",
    "val_cfg": "the validation loop: dict(type='ValLoop')",
    "test_cfg": "the test loop: dict(type='TestLoop')",
    "optim_wrapper": "dict(type='OptimWrapper', optimizer=dict(type='AdamW', lr=...))",
    "param_scheduler": "a scheduler dict or a list of them",
    "val_evaluator": "metric dict(s), or {name: metrics} per validation set",
    "test_evaluator": "metric dict(s), or {name: metrics} per test set",
    "default_hooks": "{name: hook dict or None}: overrides of the default hooks",
    "custom_hooks": "a list of extra hook dicts",
    "randomness": "dict(seed=..., deterministic=False, diff_rank_seed=False)",
    "env_cfg": "dict(dist_backend=None, dist_timeout=1800)",
    "device": "'auto' (default), 'cpu', 'cuda' or 'cuda:N'",
    "compile": "graph mode: True, or torch.compile options and on_failure, verify_steps, ... (docs/optim_wrappers.md)",
    "model_wrapper_cfg": "extra DistributedDataParallel arguments",
    "parallel": "dict(data=None, fsdp=None, tensor=1, pipeline=1, rank0_init=False, cpu_offload=False, ...): how the processes split the work (docs/parallel.md)",
    "activation_checkpointing": "None, 'blocks' or dict(modules=[class names]): recompute in the backward",
    "log_level": "'INFO' (default), 'DEBUG', 'WARNING'",
    "load_from": "weights to load (no resume): a path, or dict(path=..., strict=True, remap=...)",
    "resume": "True for the latest checkpoint in work_dir, or a checkpoint path",
    "resume_options": "dict(allow_changes=[...]): schedule changes accepted on resume",
    "custom_imports": "dict(imports=['my_module']): modules to import before anything is built",
    "preemption": "dict(signals=['SIGTERM', 'SIGUSR1', 'SIGINT']) (default): save and stop on "
                  "these; None: off",
    "micro_batch": "dict(global_batch=..., table=[(GB, micro-batch), ...], cpu=...): the micro-batch "
                   "train_dataloader.batch_size='auto' takes from the GPU's memory (docs/config.md)",
}


# The value each key takes when the config leaves it out, as docs/reference.md shows it.
TOP_LEVEL_DEFAULTS = {
    "model": "required",
    "work_dir": "'work_dirs/default'",
    "experiment_name": "the config file's name",
    "train_dataloader": "None: no training",
    "val_dataloader": "None: no validation",
    "test_dataloader": "None: no test",
    "train_cfg": "None: no training",
    "val_cfg": "dict(type='ValLoop')",
    "test_cfg": "dict(type='TestLoop')",
    "optim_wrapper": "None: no training",
    "param_scheduler": "None: a constant learning rate",
    "val_evaluator": "None",
    "test_evaluator": "None",
    "default_hooks": "None: libai.hooks.DEFAULT_HOOKS as they are",
    "custom_hooks": "None",
    "randomness": "dict(seed=None, deterministic=False, diff_rank_seed=False): a seed is drawn and logged",
    "env_cfg": "dict(dist_backend=None, dist_timeout=1800): the backend from the device",
    "device": "'auto': CUDA when available, else CPU",
    "compile": "False",
    "model_wrapper_cfg": "None: DistributedDataParallel's own defaults",
    "parallel": "None: data parallel over every process",
    "activation_checkpointing": "None: activations kept for the backward",
    "log_level": "'INFO'",
    "load_from": "None",
    "resume": "False",
    "resume_options": "None",
    "custom_imports": "None",
    "preemption": "dict(signals=['SIGTERM', 'SIGUSR1', 'SIGINT'])",
    "micro_batch": "None: train_dataloader.batch_size and optim_wrapper.accumulative_counts as written",
}


def validate_top_level(cfg: Any) -> None:
    """Refuse unknown top-level keys, with a suggestion; helper variables start with '_'."""
    for key in cfg:
        if key not in TOP_LEVEL_KEYS and not str(key).startswith("_"):
            hint = did_you_mean(str(key), TOP_LEVEL_KEYS)
            raise ConfigError(
                f"Unknown top-level config key '{key}'.{hint} Valid keys: "
                f"{', '.join(TOP_LEVEL_KEYS)}. (In a .py config, name helper variables with a "
                f"leading underscore, e.g. '_batch_size', so they are not taken as keys.)"
            )
    if "model" not in cfg:
        raise ConfigError("The config has no 'model' key: add model=dict(type='YourModel', ...).")


def build_model(cfg: Any) -> nn.Module:
    if isinstance(cfg, nn.Module):
        return cfg
    model = MODELS.build(cfg, path="model")
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model: {type(model).__name__} is not a torch.nn.Module.")
    return model


def build_loader(cfg: Any, section: str, seed: int, data_parallel: DataParallel,
                 diff_rank_seed: bool) -> Any:
    """Build one data loader from its dict (or return a given DataLoader); its sampler reads
    this process's share of the data (``data_parallel``: tensor-parallel peers share one).
    Evaluation samplers do not pad the shares: every sample counts once, in the loss too."""
    from libai.data import build_dataloader

    if not isinstance(cfg, dict):
        return cfg
    return build_dataloader(cfg, seed=seed, world_size=data_parallel.size, rank=data_parallel.rank,
                            diff_rank_seed=diff_rank_seed, path=section,
                            pad=section.startswith("train"))


def check_model_fits_data(model: nn.Module, loader: Any, section: str) -> None:
    """Refuse a model whose vocabulary or length does not fit the data, before any step runs.

    A text dataset states ``metainfo["vocab_size"]`` (its tokenizer's) and
    ``metainfo["max_seq_length"]``; a text model has ``vocab_size`` and
    ``max_position_embeddings``. Where both sides say, they must agree: ids beyond the
    embedding table would fail deep inside the first forward, and a sequence beyond the position
    table likewise.
    """
    meta = getattr(getattr(loader, "dataset", None), "metainfo", None)
    if not isinstance(meta, dict):
        return
    data_vocab, model_vocab = meta.get("vocab_size"), getattr(model, "vocab_size", None)
    if isinstance(data_vocab, int) and isinstance(model_vocab, int) and data_vocab != model_vocab:
        source = meta.get("tokenizer") or "its tokenizer"
        raise ConfigError(
            f"model.vocab_size={model_vocab} but the tokenizer of {section}.dataset ({source}) "
            f"has {data_vocab} tokens: set model.vocab_size={data_vocab}, or give the dataset a "
            f"tokenizer of {model_vocab} tokens."
        )
    _check_classes(model, meta, section)
    length, positions = meta.get("max_seq_length"), getattr(model, "max_position_embeddings", None)
    if isinstance(length, int) and isinstance(positions, int) and length > positions:
        # RoBERTa's table holds its padding offset too: the config value to set is larger
        declared = (getattr(model, "config", None) or {}).get("max_position_embeddings")
        offset = declared - positions if isinstance(declared, int) and declared > positions else 0
        raise ConfigError(
            f"{section}.dataset makes sequences of {length} tokens but the model has only "
            f"max_position_embeddings={positions}: shorten the dataset's sequence length or raise "
            f"model.max_position_embeddings to at least {length + offset}"
            + (f" ({offset} of its positions go to the padding offset)." if offset else ".")
        )


def _check_classes(model: nn.Module, meta: dict, section: str) -> None:
    """A classifier's ``config["num_classes"]`` against the labels of a labeled dataset
    (``metainfo["classes"]``; a regression set wants one output)."""
    config = getattr(model, "config", None)
    num_classes = config.get("num_classes") if isinstance(config, Mapping) else None
    if not isinstance(num_classes, int) or "task" not in meta:
        return
    classes = meta.get("classes")
    want = 1 if meta["task"] == "regression" else len(classes or ())
    if want and want != num_classes:
        named = f" ({', '.join(classes)})" if classes and len(classes) <= 12 else ""
        raise ConfigError(
            f"model.num_classes={num_classes} but {section}.dataset has {want} "
            + ("output (task='regression')" if meta["task"] == "regression" else f"labels{named}")
            + f": set model.num_classes={want}.")


def dataset_meta(loader: Any) -> dict | None:
    """What a checkpoint and the metrics keep of a loader's dataset: its class names."""
    meta = getattr(getattr(loader, "dataset", None), "metainfo", None)
    if isinstance(meta, dict) and meta.get("classes"):
        return {"classes": list(meta["classes"])}
    return None


def _is_multi(loader_cfg: Any) -> bool:
    return (
        isinstance(loader_cfg, dict)
        and "dataset" not in loader_cfg
        and len(loader_cfg) > 0
        and all(isinstance(v, dict) and "dataset" in v for v in loader_cfg.values())
    )


def build_eval_sets(loader_cfg: Any, evaluator_cfg: Any, stage: str, build_one: Any) -> tuple[Any, Any]:
    """Data loader(s) and evaluator(s) for one stage; several named sets give two dicts."""
    from libai.evaluator import build_evaluator

    if evaluator_cfg is None:
        raise ConfigError(f"{stage}_dataloader is set but {stage}_evaluator is not: add e.g. "
                          f"{stage}_evaluator=dict(type='Accuracy').")
    if not _is_multi(loader_cfg):
        loader = build_one(loader_cfg, f"{stage}_dataloader")
        return loader, _with_meta(_named(f"{stage}_evaluator", build_evaluator, evaluator_cfg),
                                  loader)
    loaders = {name: build_one(c, f"{stage}_dataloader.{name}") for name, c in loader_cfg.items()}
    per_set = isinstance(evaluator_cfg, dict) and set(evaluator_cfg) == set(loaders)
    if isinstance(evaluator_cfg, dict) and not per_set and "type" not in evaluator_cfg:
        unknown = sorted(set(evaluator_cfg) - set(loaders))
        missing = sorted(set(loaders) - set(evaluator_cfg))
        hint = did_you_mean(unknown[0], missing) if unknown and missing else ""
        raise ConfigError(
            f"{stage}_evaluator names sets {sorted(evaluator_cfg)} but {stage}_dataloader has "
            f"{sorted(loaders)}: give one evaluator per set under the same names, or one "
            f"evaluator (dict(type=...)) for every set.{hint}")
    evaluators = {
        name: _named(f"{stage}_evaluator" + (f".{name}" if per_set else ""), build_evaluator,
                     evaluator_cfg[name] if per_set else evaluator_cfg)
        for name in loaders
    }
    return loaders, {name: _with_meta(e, loaders[name]) for name, e in evaluators.items()}


def _with_meta(evaluator: Any, loader: Any) -> Any:
    """The evaluator, told its dataset's class names (metrics that report per class read them)."""
    meta = getattr(getattr(loader, "dataset", None), "metainfo", None)
    if isinstance(meta, dict) and hasattr(evaluator, "dataset_meta"):
        evaluator.dataset_meta = meta
    return evaluator


def _named(path: str, build_fn: Any, cfg: Any) -> Any:
    """``build_fn(cfg, path)``; a LibaiError that does not say where gets the path in front."""
    try:
        return build_fn(cfg, path=path)
    except LibaiError as e:
        if path in str(e):
            raise
        raise type(e)(f"{path}: {e}") from e


def build_loop(loop_cfg: Any, default_type: str, section: str, **default_args: Any) -> Any:
    cfg = dict(loop_cfg or {})
    cfg.setdefault("type", default_type)
    return LOOPS.build(cfg, default_args=default_args, path=section)


def build_hooks(default_hooks: dict, overrides: Any, custom_hooks: Any) -> list:
    """Default hooks updated by ``overrides`` (None disables one), then custom hooks; sorted by
    priority, ties kept in the order given."""
    from libai.hooks import Hook
    from libai.hooks.hook import get_priority

    merged = {name: dict(cfg) for name, cfg in default_hooks.items()}
    for name, cfg in (overrides or {}).items():
        if name not in merged:
            raise ConfigError(f"default_hooks.{name} is not a default hook.{did_you_mean(name, merged)} "
                              f"Default hooks: {', '.join(merged)}. Add new hooks under custom_hooks.")
        if cfg is None:
            merged[name] = None
        elif isinstance(cfg, Hook):
            merged[name] = cfg
        else:
            new = dict(cfg)
            merged[name] = new if "type" in new else {**merged[name], **new}
    hooks = []
    entries = [(f"default_hooks.{n}", c) for n, c in merged.items() if c is not None]
    entries += [(f"custom_hooks.{i}", c) for i, c in enumerate(custom_hooks or [])]
    for path, cfg in entries:
        if isinstance(cfg, Hook):
            hook = cfg
        else:
            cfg = dict(cfg)
            priority = cfg.pop("priority", None)
            hook = HOOKS.build(cfg, path=path)
            if priority is not None:
                hook.priority = priority
        hook.priority = get_priority(hook.priority)
        hooks.append(hook)
    return sorted(hooks, key=lambda h: h.priority)


def build_train_step(execution: Any, device: Any, data_parallel: DataParallel,
                     tensor_parallel: bool, logger: Any) -> Any:
    """``step(data, optim_wrapper)`` for the run: the pipeline's (its schedule runs forward and
    backward), the model's own ``train_step`` (the record's ``model`` passed as ``forward``) or
    the default one; under tensor parallel, inside the loss-parallel context. ``execution``: the
    run's :class:`~libai.model.execution.Execution` record."""
    from functools import partial

    from libai.model import make_train_step
    from libai.parallel import in_loss_parallel

    model, forward = execution.unwrapped, execution.model
    own = getattr(model, "train_step", None)
    if execution.schedule is not None:  # the schedule runs forward and backward
        if own is not None:
            raise ConfigError(f"{type(model).__name__} has its own train_step, which a pipeline "
                              f"cannot run (the schedule calls the stages): remove "
                              f"parallel.pipeline, or train with the default step.")
        return execution.schedule.train_step
    step = partial(own, forward=forward) if own is not None else make_train_step(
        model, forward, device, data_parallel)
    if own is not None and execution.graph is not None:
        logger.info(f"Graph mode: {type(model).__name__} has its own train_step: its calls to "
                    f"forward are compiled and update_params steps with the compiled update; the "
                    f"rest of its train_step runs eager.")
    return in_loss_parallel(step) if tensor_parallel else step


def build_eval_loop(cfg: Any, stage: str, build_one: Any, runner: Any) -> Any:
    """The ``val`` or ``test`` loop over every evaluation set of ``cfg``, or None when the config
    has no ``{stage}_dataloader``; ``build_one(loader_cfg, section)`` builds one loader."""
    loader_cfg = cfg.get(f"{stage}_dataloader")
    if loader_cfg is None:
        return None
    loaders, evaluators = build_eval_sets(loader_cfg, cfg.get(f"{stage}_evaluator"), stage, build_one)
    return build_loop(cfg.get(f"{stage}_cfg"), "ValLoop" if stage == "val" else "TestLoop",
                      f"{stage}_cfg", runner=runner, dataloader=loaders, evaluator=evaluators)


def hook_services(hooks: list) -> tuple[Any, Any]:
    """The hooks that serve the others: the writer (the first LoggerHook: its interval and its
    backends) and the checkpoints' save policy (the first CheckpointHook), each None when absent."""
    from libai.hooks import CheckpointHook, LoggerHook

    writer = next((h for h in hooks if isinstance(h, LoggerHook)), None)
    return writer, next((h for h in hooks if isinstance(h, CheckpointHook)), None)
