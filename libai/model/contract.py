"""The model contract: everything the engine reads from a model, in one list.

Any ``nn.Module`` trains. The only requirement is the call: in train mode ``model(batch)`` returns
a loss tensor or a dict whose keys containing ``loss`` are summed; in eval mode it returns what
the metrics consume. Everything else below is optional: a model that declares a field gets the
behaviour, one that does not gets the default. :data:`CONTRACT` lists the fields with who reads
them; ``tests/model/test_contract.py`` fails when the engine reads a model attribute that is not
listed here, or a listed reader stops reading it. ``docs/models.md`` shows the same table
(:func:`describe`).

The code that runs a model (default steps, ``BaseModel``) is in :mod:`libai.model.steps`. What
``num_items`` means under data parallel is defined here, by :func:`mean_over_data_parallel`: a
loss that is a mean over a number of items that varies from batch to batch (BERT's masked tokens)
says so with ``"num_items": {"mlm_loss": count}``, and the engine then makes it the mean over the
items of every rank's batch, as one process would compute it on the whole batch; without the
entry, each rank's mean counts equally (right when every batch has as many items).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from libai.utils.dist import DataParallel, all_reduce_sum

__all__ = ["CONTRACT", "ContractField", "check_model", "describe", "field", "mean_over_data_parallel"]

# what the field is: the call itself, an entry of the dict the call returns, a method or an
# attribute of the model (class or instance), or a class attribute of any of its submodules
KINDS = ("call", "output", "method", "attribute", "submodule attribute")


@dataclass(frozen=True)
class ContractField:
    """One thing the engine reads from a model.

    Args:
        name: The attribute, method or output key, as the engine spells it.
        kind: One of ``KINDS``.
        required: Whether every model must have it (only the call is).
        read_by: The files that read it, relative to the repository root.
        meaning: What the model promises by declaring it, and what the engine does with it.
    """

    name: str
    kind: str
    required: bool
    read_by: tuple[str, ...]
    meaning: str


CONTRACT: tuple[ContractField, ...] = (
    ContractField(
        "forward", "call", True,
        ("libai/model/steps.py", "libai/model/graph/mode.py"),
        "`model(batch)` with what the data loader yields. Train mode: a loss tensor, or a dict "
        "whose keys containing `loss` are summed into the loss (every tensor entry is logged). "
        "Eval mode: what the metrics read, usually a dict."),
    ContractField(
        "loss", "output", False,
        ("libai/model/steps.py", "libai/loops/evaluate.py"),
        "In eval mode, logged as the validation loss: the mean over the set, each batch "
        "weighed by its samples (or by `num_items`)."),
    ContractField(
        "num_items", "output", False,
        ("libai/model/contract.py", "libai/loops/evaluate.py"),
        "`{loss key: count}`: that loss is a mean over `count` items that vary by batch (masked "
        "tokens). Under data parallel it becomes the mean over every rank's items "
        "(`mean_over_data_parallel`); evaluation weighs the term by its items."),
    ContractField(
        "train_step", "method", False, ("libai/runner/build.py",),
        "`train_step(data, optim_wrapper, forward)` replaces the default step (several "
        "optimizers, GANs); it calls `forward(...)`, the DDP/compiled wrapper, not `self(...)`."),
    ContractField(
        "val_step", "method", False, ("libai/runner/runner.py",),
        "`val_step(data, forward)` replaces the default evaluation step, for validation and "
        "test alike (`BaseModel.test_step` is not called by the engine)."),
    ContractField(
        "data_preprocessor", "attribute", False, ("libai/model/steps.py",),
        "A module called as `data_preprocessor(batch, training)` before each forward; without "
        "it a batch moves to the model's device (on the CPU it is not moved)."),
    ContractField(
        "vocab_size", "attribute", False,
        ("libai/runner/build.py", "libai/cli/generate.py"),
        "Checked against the dataset's `metainfo['vocab_size']` (its tokenizer's) before the "
        "first step, and against the tokenizer when generating."),
    ContractField(
        "max_position_embeddings", "attribute", False,
        ("libai/runner/build.py", "libai/model/generation.py"),
        "Checked against the dataset's `metainfo['max_seq_length']` before the first step, and "
        "the context `generate` crops to."),
    ContractField(
        "parallel_blocks", "attribute", False, ("libai/parallel/apply.py", "libai/optim/layer_decay.py"),
        "Class names of the repeated blocks: FSDP shards each on its own, "
        "`activation_checkpointing='blocks'` recomputes each, graph mode under FSDP or a "
        "pipeline compiles each, a pipeline's stages hold whole ones, layer-wise lr decay "
        "numbers the layers by them. Without it, name them with "
        "`parallel.blocks` (`paramwise_cfg.layer_decay_blocks` for the decay)."),
    ContractField(
        "tp_plan", "submodule attribute", False, ("libai/parallel/apply.py",),
        "On a block class: `{submodule path: style}`, style 'colwise', 'rowwise' or 'vocab': "
        "how `parallel.tensor` splits it. Without any, tensor parallel stops with an error."),
    ContractField(
        "tp_divisible", "submodule attribute", False, ("libai/parallel/apply.py",),
        "On a block with a `tp_plan`: `{config path: count}` that `parallel.tensor` must divide "
        "(the heads; Llama's query and key/value heads): a size that does not is one line "
        "before any split."),
    ContractField(
        "pipeline_split", "attribute", False, ("libai/parallel/pipeline.py",),
        "`{'first': [module paths], 'last': [module paths]}`: where `parallel.pipeline` cuts "
        "the model. The first part (embeddings) goes to the first stage, the last part (final "
        "norm, heads) to the last, the `parallel_blocks` in order between them; a module in "
        "both (a tied LM head's embeddings) lives on both ends, its gradients summed. Every "
        "parameter must be in a part or a block. Without it, a pipeline stops with an error."),
    ContractField(
        "pipeline_first", "method", False,
        ("libai/parallel/pipeline.py", "libai/model/layers/parts.py"),
        "`pipeline_first(batch) -> h`: the first block's input. With `pipeline_block_kwargs` "
        "and `pipeline_last`, what `forward` is made of (`forward_in_parts`)."),
    ContractField(
        "pipeline_block_kwargs", "method", False,
        ("libai/parallel/pipeline.py", "libai/model/layers/parts.py"),
        "`pipeline_block_kwargs(h, batch) -> dict`: what every block takes besides `h` (masks, "
        "rotary tables), computed on each stage from its microbatch."),
    ContractField(
        "pipeline_last", "method", False,
        ("libai/parallel/pipeline.py", "libai/model/layers/parts.py"),
        "`pipeline_last(h, batch)`: the last block's output to what `forward` returns."),
    ContractField(
        "count_items", "method", False, ("libai/parallel/pipeline_module.py",),
        "`count_items(batch) -> {loss key: count}`: the `num_items` of a training batch, from "
        "the batch alone, so that a pipeline weighs each microbatch's loss before it runs."),
    ContractField(
        "why_no_output", "method", False, ("libai/loops/evaluate.py",),
        "`why_no_output(key)`: a sentence saying why eval mode returns no `key` (a setting turned "
        "that head off), or None; a metric that looks for `key` in vain ends its error with it (BERT: "
        "`model.second_head=None` and an `nsp_logits` metric)."),
    ContractField(
        "hf_model_type", "attribute", False,
        ("libai/model/zoo/hf.py",),
        "`'bert'`, `'gpt2'`, `'llama'` or `'roberta'`: the model converts to and from Hugging Face folders "
        "(`load_from` a folder, `save_hf_pretrained`) through that family's adapter "
        "(`libai/model/zoo/family.py`; the zoo's classes get it from their family). Needs `config`."),
    ContractField(
        "config", "attribute", False,
        ("libai/model/zoo/hf.py", "libai/cli/convert_checkpoint.py", "libai/runner/build.py"),
        "The constructor's arguments as a mapping (the zoo's `BertConfig`, `GPTConfig`): "
        "`MODELS.build(dict(type=..., **model.config))` builds the same model."),
    ContractField(
        "logits", "method", False, ("libai/model/generation.py",),
        "`logits(input_ids, kv_caches=None, attention_mask=None, position_ids=None)`: "
        "next-token logits (B, S, V), this call's keys and values appended to the caches; what "
        "`libai.model.generate` decodes with."),
    ContractField(
        "new_kv_caches", "method", False, ("libai/model/generation.py",),
        "`new_kv_caches(batch_size)`: empty per-layer caches that `logits` fills, for "
        "`generate`."),
    ContractField(
        "generate", "method", False, ("libai/cli/generate.py",),
        "`generate(input_ids, max_new_tokens, ...)`, for `libai generate` / tools/generate.py."),
)

_BY_NAME = {f.name: f for f in CONTRACT}


def field(name: str) -> ContractField:
    """The contract's entry for ``name``; KeyError for a name the engine does not read."""
    return _BY_NAME[name]


def describe() -> str:
    """The contract as a Markdown table (docs/models.md holds this text).

    Raises:
        ValueError: A field's text holds a ``|``, which would split its table cell.
    """
    if any("|" in f.meaning for f in CONTRACT):
        raise ValueError("a ContractField's meaning holds '|': rephrase it for the table")
    rows = ["| name | kind | required | read by | meaning |", "| --- | --- | --- | --- | --- |"]
    for f in CONTRACT:
        readers = ", ".join(f"`{r}`" for r in f.read_by)
        rows.append(f"| `{f.name}` | {f.kind} | {'yes' if f.required else 'no'} | {readers} | "
                    f"{f.meaning} |")
    return "\n".join(rows)


_TP_STYLES = ("colwise", "rowwise", "vocab")


def check_model(model: nn.Module) -> list[str]:
    """What is wrong with the optional fields ``model`` declares; empty when nothing is.

    A field the model leaves out is never a problem (the engine uses its default); one it
    declares must have the kind of value the engine reads.
    """
    problems: list[str] = []
    name = type(model).__name__

    def bad(text: str) -> None:
        problems.append(f"{name}.{text}")

    for attr in ("vocab_size", "max_position_embeddings"):
        value = getattr(model, attr, None)
        if value is not None and not (isinstance(value, int) and value > 0):
            bad(f"{attr}={value!r}: expected a positive int")
    for attr in ("train_step", "val_step", "generate", "data_preprocessor"):
        value = getattr(model, attr, None)
        if value is not None and not callable(value):
            bad(f"{attr} is not callable")
    blocks = getattr(model, "parallel_blocks", None)
    if blocks is not None:
        classes = {c.__name__ for m in model.modules() for c in type(m).__mro__}
        if isinstance(blocks, str) or not all(isinstance(b, str) for b in blocks):
            bad(f"parallel_blocks={blocks!r}: expected a tuple of class names")
        else:
            problems += [f"{name}.parallel_blocks names {b!r}, which no submodule is"
                         for b in blocks if b not in classes]
    for path, module in model.named_modules():
        plan = getattr(module, "tp_plan", None)
        if plan is None:
            continue
        for sub, style in plan.items() if isinstance(plan, Mapping) else [("", plan)]:
            if style not in _TP_STYLES:
                bad(f"{path}.tp_plan[{sub!r}]={style!r}: expected one of {_TP_STYLES}")
                continue
            try:
                module.get_submodule(sub)
            except AttributeError:
                bad(f"{path}.tp_plan names {sub!r}, which is not a submodule")
    kind = getattr(model, "hf_model_type", None)
    if kind is not None:
        config = getattr(model, "config", None)
        if not isinstance(config, Mapping):
            bad(f"hf_model_type={kind!r} needs a `config` mapping of the constructor's arguments")
    return problems


def mean_over_data_parallel(outputs: Any, data_parallel: DataParallel | None) -> Any:
    """Make the losses named in ``outputs["num_items"]`` means over every data share's items.

    A rank's loss ``mean = sum / n`` becomes ``sum * size / N``, ``N`` the items of all ``size``
    data shares: the gradient average over the shares (DDP, FSDP) is then ``sum of sums / N``,
    the mean one process computes over the whole batch. One all-reduce of the counts. Nothing
    changes in one data share (one process, or tensor parallel alone), or without the entry.

    Args:
        outputs: What the model returned in train mode.
        data_parallel: How the processes split the data. None: one share.

    Returns:
        ``outputs`` itself, or a copy with those losses rescaled.
    """
    items = outputs.get("num_items") if type(outputs) is dict else None
    if not items or data_parallel is None or data_parallel.size == 1:
        return outputs
    keys = list(items)
    first = outputs[keys[0]]
    local = torch.stack([torch.as_tensor(items[k], dtype=torch.float64, device=first.device)
                         for k in keys])  # (K,)
    total = all_reduce_sum(local.clone()) / data_parallel.replicas  # replicas count once
    # no item anywhere: the loss is what the model made of it (0 or NaN), left as it is
    scale = torch.where(total > 0, local * data_parallel.size / total.clamp(min=1), 1.0)
    out = dict(outputs)
    for i, key in enumerate(keys):
        out[key] = outputs[key] * scale[i].to(outputs[key].dtype)
    return out
