"""Pipeline parallelism: the model's blocks split in order over ``parallel.pipeline`` processes,
a batch run through them in microbatches by a schedule of ``torch.distributed.pipelining``
(GPipe, 1F1B, interleaved 1F1B, looped BFS). See docs/parallel.md, "Pipeline parallel".

The model says where it can be cut (libai.model.contract): its ``parallel_blocks`` are the units
a stage holds, and ``pipeline_split`` names the modules of its first part (the embeddings: on the
first stage) and of its last part (final norm, heads: on the last stage). Its ``forward`` is
``pipeline_last(blocks(pipeline_first(batch)), batch)`` (:func:`libai.model.layers.forward_in_parts`),
so a stage runs the very code one process runs. A module named by both parts (the word
embeddings an LM head is tied to) lives on the first and the last stage, and their gradients are
summed after each backward (Megatron-LM's embedding group): the update is one process's.

Every process builds the whole model (the same seed: the same weights), then keeps its part
(:func:`prune`): the others' blocks become :class:`Absent` placeholders holding nothing, so the
state dict keeps the unsplit model's names, and a pipeline checkpoint (DCP, libai.checkpoint.sharded)
loads at another pipeline size or into one process.

What runs the stages, the losses' weights and the evaluation's merge:
:mod:`libai.parallel.pipeline_module` (:class:`PipelineModule`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from libai.model.execution import PIPELINE_FLOPS
from libai.utils.errors import ConfigError, TrainingError

from .config import ParallelConfig
from .pipeline_module import PipelineModule, bubble, merge_outputs
from .stage import StageModule

__all__ = ["Absent", "PipelineModule", "StageModule", "balanced_split", "bubble",
           "build_pipeline", "execution_fields", "merge_outputs", "prune",
           "stage_layout"]


class Absent(nn.Module):
    """A part of the model that lives on another pipeline stage: no parameters, not callable."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise TrainingError(f"{self.path} lives on another pipeline stage: this process holds "
                            f"only its own stage's part of the model.")

    def extra_repr(self) -> str:
        return f"{self.path!r}: on another pipeline stage"


def balanced_split(costs: Sequence[float], num_stages: int, last: float = 0.0) -> list[int]:
    """Blocks per stage, in order, that make the busiest stage as light as can be: ``costs`` the
    blocks' (their parameters: the FLOPs of a token are about twice as many), ``last`` the last
    part's, run by the last stage (an LM head of V x H is as costly as V x H block parameters);
    the first part, a lookup, counts nothing. Every stage gets a block; among equally light
    splits, the evenest."""
    n = len(costs)
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + float(c))
    inf = (float("inf"), float("inf"))
    # best[s][i]: (the busiest stage's load, the sum of the loads' squares) of s stages over
    # blocks 0 .. i - 1, the lightest such split found (the squares break ties: evener);
    # cut[s][i]: where its stage s starts
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = (0.0, 0.0)
    for s in range(1, num_stages + 1):
        ends = [n] if s == num_stages else range(s, n - (num_stages - s) + 1)
        for i in ends:
            extra = last if s == num_stages else 0.0
            for j in range(i - 1, s - 2, -1):  # the latest start first: exact ties keep it
                load = prefix[i] - prefix[j] + extra
                busiest, squares = best[s - 1][j]
                key = (max(busiest, load), squares + load * load)
                if key < best[s][i]:
                    best[s][i], cut[s][i] = key, j
    sizes, i = [], n
    for s in range(num_stages, 0, -1):
        sizes.append(i - cut[s][i])
        i = cut[s][i]
    return sizes[::-1]


def stage_layout(costs: Sequence[float], pc: ParallelConfig,
                 last: float = 0.0) -> list[list[int]]:
    """The block indices of each stage: ``pc.pipeline_stage_ids`` (the stage of each block), or
    :func:`balanced_split` of the blocks' ``costs`` (and the last part's).

    Raises:
        ConfigError: fewer blocks than stages, stage ids of another length, out of order or out
            of range, or a stage left without a block.
    """
    stages, num_blocks = pc.num_stages, len(costs)
    total = (f"parallel.pipeline={pc.pipeline}" if pc.virtual_stages == 1 else
             f"parallel.pipeline={pc.pipeline} x virtual_stages={pc.virtual_stages}")
    ids = pc.pipeline_stage_ids
    if ids is None:
        if num_blocks < stages:
            raise ConfigError(f"{total} = {stages} stages, but the model has {num_blocks} "
                              f"blocks: each stage holds at least one; use at most "
                              f"{num_blocks} stages.")
        sizes = balanced_split(costs, stages, last)
        ids = tuple(s for s, n in enumerate(sizes) for _ in range(n))
    if len(ids) != num_blocks:
        even = balanced_split([1.0] * num_blocks, stages) if num_blocks >= stages else []
        raise ConfigError(f"parallel.pipeline_stage_ids has {len(ids)} entries, but the model has "
                          f"{num_blocks} blocks: give the stage of each block, e.g. "
                          f"{[s for s, n in enumerate(even) for _ in range(n)]}.")
    if any(b < a for a, b in zip(ids, ids[1:])) or min(ids) < 0 or max(ids) >= stages:
        raise ConfigError(f"parallel.pipeline_stage_ids={list(ids)}: expected stages 0 ... "
                          f"{stages - 1} in order (the blocks run in order: stage k's before "
                          f"stage k + 1's).")
    empty = [s for s in range(stages) if s not in ids]
    if empty:
        raise ConfigError(f"parallel.pipeline_stage_ids={list(ids)} leaves stage {empty[0]} "
                          f"empty ({total} = {stages} stages): give each stage a block.")
    return [[i for i, s in enumerate(ids) if s == stage] for stage in range(stages)]


def _under(name: str, paths: Sequence[str]) -> bool:
    """``name`` is one of ``paths`` or inside one."""
    return any(name == p or name.startswith(p + ".") for p in paths)


def model_parts(model: nn.Module, block_names: Any) -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """The paths of the model's blocks (in order) and its ``pipeline_split``, checked.

    Raises:
        ConfigError: the model declares no ``pipeline_split`` (or the methods it goes with), a
            path that is not a submodule, or leaves a parameter in no part.
    """
    from libai.model.blocks import find_blocks

    name = type(model).__name__
    split = getattr(model, "pipeline_split", None)
    methods = ("pipeline_first", "pipeline_block_kwargs", "pipeline_last")
    if not isinstance(split, Mapping) or not all(callable(getattr(model, m, None)) for m in methods):
        raise ConfigError(
            f"parallel.pipeline: {name} does not say how to cut it into stages. A model runs in a "
            f"pipeline when it declares pipeline_split = {{'first': [embedding modules], 'last': "
            f"[final norm and head modules]}} and the methods {', '.join(methods)} (see "
            f"docs/models.md, 'The model contract'; GPTForCausalLM, BertForPreTraining and "
            f"LlamaForCausalLM do).")
    unknown = set(split) - {"first", "last"}
    if unknown:
        raise ConfigError(f"{name}.pipeline_split has keys {sorted(unknown)}: expected 'first' "
                          f"and 'last'.")
    parts = {k: tuple(split.get(k, ())) for k in ("first", "last")}
    for path in (*parts["first"], *parts["last"]):
        try:
            model.get_submodule(path)
        except AttributeError:
            raise ConfigError(f"{name}.pipeline_split names {path!r}, which is not a submodule."
                              ) from None
    ids = {id(m): n for n, m in model.named_modules()}
    blocks = [ids[id(b)] for b in find_blocks(model, block_names)]
    if not blocks:
        raise ConfigError(f"parallel.pipeline: {name} declares no parallel_blocks, the units a "
                          f"stage holds; name them with parallel.blocks=['MyBlock'].")
    placed = [*blocks, *parts["first"], *parts["last"]]
    loose = [n for n, _ in model.named_parameters() if not _under(n, placed)]
    if loose:
        raise ConfigError(f"{name}.pipeline_split places {loose[0]} on no stage: name its module "
                          f"under 'first' or 'last' (or make it part of a block).")
    return blocks, parts


def prune(model: nn.Module, keep: Sequence[str], placed: Sequence[str]) -> None:
    """Replace every module of ``placed`` (blocks and parts) that is not in ``keep`` with an
    :class:`Absent` placeholder, in place; a module holding a kept one is pruned inside."""

    def visit(module: nn.Module, prefix: str) -> None:
        for name, child in list(module._modules.items()):
            path = prefix + name
            if child is None or _under(path, keep):
                continue
            if any(k.startswith(path + ".") for k in keep):
                visit(child, path + ".")
            elif _under(path, placed) or any(p.startswith(path + ".") for p in placed):
                module._modules[name] = Absent(path)
        if _under(prefix[:-1], placed):  # a kept module's container: its own tensors go too
            for attr in list(module._parameters):
                module._parameters.pop(attr)

    visit(model, "")


def build_pipeline(model: nn.Module, pc: ParallelConfig, mesh: Any, device: torch.device,
                   rank: int, data_parallel: Any, *, activation_checkpointing: Any = None,
                   param_dtype: torch.dtype | None = None) -> tuple[PipelineModule, list[str]]:
    """Cut ``model`` (built whole on every process) down to this process's stages and wrap them.

    Activation checkpointing and tensor parallel apply to the blocks kept; FSDP shards each kept
    block and the stage (one stage per process); data parallel without FSDP averages the
    gradients after each step (no DDP wraps a stage).

    Returns:
        The :class:`PipelineModule` to train, and lines for the log.
    """
    import torch.distributed as tdist

    from .apply import _fully_shard, checkpoint_and_split_layers

    if pc.rank0_init:
        raise ConfigError("parallel.rank0_init with parallel.pipeline: not supported; each "
                          "process builds the model and keeps its stages' part.")
    if pc.virtual_stages > 1 and pc.fsdp > 1:
        raise ConfigError(f"parallel.pipeline_schedule={pc.pipeline_schedule!r} holds several "
                          f"stages per process, which FSDP cannot shard one by one yet: use "
                          f"'1f1b' or 'gpipe' with parallel.fsdp.")
    blocks, parts = model_parts(model, pc.blocks)
    layout = stage_layout([_size(model.get_submodule(b)) for b in blocks], pc,
                          last=sum(_size(model.get_submodule(p)) for p in parts["last"]))
    S, P = pc.num_stages, pc.pipeline
    pp_rank = pc.pipeline_rank(rank)
    mine = [pp_rank + k * P for k in range(pc.virtual_stages)]  # looped: stage s on rank s % P
    keep = [blocks[i] for s in mine for i in layout[s]]
    keep += list(parts["first"]) if 0 in mine else []
    keep += list(parts["last"]) if S - 1 in mine else []
    tied = [n for n, _ in model.named_parameters()
            if _under(n, parts["first"]) and _under(n, parts["last"])]
    prune(model, keep, [*blocks, *parts["first"], *parts["last"]])
    stages = [StageModule(model, s, S, [model.get_submodule(blocks[i]) for i in layout[s]])
              for s in mine]
    lines = [pc.describe(), _describe_layout(layout, blocks, pc)]
    lines += checkpoint_and_split_layers(model, pc, mesh, activation_checkpointing)
    if pc.fsdp > 1:
        _fully_shard(stages[0], pc, mesh, param_dtype)
        lines.append(f"FSDP2: each stage sharded over {pc.fsdp} processes")
    inner = pc.data * pc.fsdp * pc.tensor
    groups: dict[str, Any] = {"pipeline": mesh["pipeline"].get_group(), "tied": None, "data": None}
    if tied:  # every process creates every group, in the same order
        for i in range(inner):
            ends = [i, i + (P - 1) * inner]
            group = tdist.new_group(ends)
            if rank in ends:
                groups["tied"] = group
        lines.append(f"Pipeline: {', '.join(tied)} held by the first and the last stage, their "
                     f"gradients summed after each backward")
    if pc.data > 1 and pc.fsdp == 1:
        groups["data"] = mesh["data"].get_group()
    last_rank = rank % inner + (P - 1) * inner
    return PipelineModule(model, stages, pc, device, groups, tied, last_rank, data_parallel), lines


def execution_fields(pipe: PipelineModule) -> dict[str, Any]:
    """What the execution record (:class:`libai.model.execution.Execution`) says of a pipeline
    process: its stages are its parts, the pipeline runs each step, the gradient norm combines
    over the stages (the tied weights counted on the first stage only), the modules of the other
    stages are elsewhere, and FlopCounterMode cannot count a step."""
    model = pipe._model[0]
    first = any(stage.is_first for stage in pipe.stages)
    return dict(parts=tuple(pipe.stages), schedule=pipe, sharded=True,
                combine_norm=pipe.combine_norm, norm_skip=() if first else tuple(pipe.tied),
                elsewhere=tuple(n for n, m in model.named_modules() if isinstance(m, Absent)),
                stages=(tuple(stage.index for stage in pipe.stages), pipe.stages[0].num_stages),
                flops_uncountable=PIPELINE_FLOPS)


def _size(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _describe_layout(layout: list[list[int]], blocks: list[str], pc: ParallelConfig) -> str:
    def span(ids: list[int]) -> str:
        return f"block {ids[0]}" if len(ids) == 1 else f"blocks {ids[0]}-{ids[-1]}"

    stages = "; ".join(f"stage {s} (rank {s % pc.pipeline}): {span(ids)}"
                       + (" + first part" if s == 0 else "")
                       + (" + last part" if s == len(layout) - 1 else "")
                       for s, ids in enumerate(layout))
    how = "given" if pc.pipeline_stage_ids is not None else "balanced by parameters"
    return (f"Pipeline: {pc.pipeline_schedule}, {len(layout)} stages over {pc.pipeline} "
            f"processes, {len(blocks)} blocks ({how}): {stages}")
