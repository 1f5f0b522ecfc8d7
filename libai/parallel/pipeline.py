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

Losses: the schedule runs the last part on each microbatch; each loss term is weighed so that the
gradients equal one process's on the whole batch (a term that declares ``num_items`` by its share
of the items, counted before the schedule with ``count_items``; another by its share of the
samples), and no gradient is rescaled afterwards (``scale_grads=False``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn

from libai.utils.errors import ConfigError, TrainingError

from .config import SCHEDULES, ParallelConfig

__all__ = ["Absent", "PIPELINE_ATTR", "PipelineModule", "StageModule", "balanced_split", "bubble",
           "build_pipeline", "compile_blocks", "merge_outputs", "prune", "stage_layout"]


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


def bubble(stages: int, microbatches: int) -> float:
    """The idle share of a pipeline step, (p - 1) / (m + p - 1), for p stages, m microbatches."""
    return (stages - 1) / (microbatches + stages - 1)


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
    from .apply import find_blocks

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


class StageModule(nn.Module):
    """One pipeline stage, as ``torch.distributed.pipelining.PipelineStage`` runs it:
    ``forward(h, **microbatch)`` (the first stage: ``forward(**microbatch)``) runs the model's
    first part (first stage), its blocks, and the last part (last stage), which returns the
    microbatch's weighted loss in training; what it computed is kept in :attr:`records`.

    Args:
        model: The pruned model (it holds the parameters of this process's stages).
        index: The stage's position, 0 ... ``num_stages`` - 1.
        num_stages: Stages in the pipeline.
        blocks: The blocks this stage runs, in order.
    """

    def __init__(self, model: nn.Module, index: int, num_stages: int,
                 blocks: list[nn.Module]) -> None:
        super().__init__()
        self.model = model
        self.index, self.num_stages = index, num_stages
        self.is_first, self.is_last = index == 0, index == num_stages - 1
        self.blocks = blocks  # a plain list: the modules are registered under self.model
        self.records: list[Any] = []  # last stage: per microbatch, what the logs or outputs need
        self.weigh: Any = None  # last stage in training: outputs, microbatch -> (loss, logs)
        self.probing = False  # the next call is the schedule's shape probe (see forward)

    def forward(self, *args: torch.Tensor, **batch: Any) -> torch.Tensor:
        if self.probing:  # the schedule's first call runs a microbatch to learn the shapes it
            self.probing = False  # sends: it must draw no random numbers (dropout) and leave no
            with torch.random.fork_rng(devices=_rng_devices(batch)):  # record
                return self._run(args, batch, record=False)
        return self._run(args, batch, record=True)

    def _run(self, args: tuple, batch: dict, record: bool) -> torch.Tensor:
        model = self.model
        h = model.pipeline_first(batch) if self.is_first else args[0]  # (b, S, H)
        kwargs = model.pipeline_block_kwargs(h, batch)
        for block in self.blocks:
            h = block(h, **kwargs)
        if not self.is_last:
            return h
        outputs = model.pipeline_last(h, batch)
        if self.weigh is None:  # evaluation: the outputs, merged after the schedule
            if record:
                self.records.append(outputs)
            return h.new_zeros(())
        loss, logs = self.weigh(outputs, batch)
        if record:
            self.records.append(logs)
        return loss


def _rng_devices(batch: dict) -> list[int]:
    tensor = next((v for v in batch.values() if isinstance(v, torch.Tensor)), None)
    return [tensor.device.index or 0] if tensor is not None and tensor.is_cuda else []


def _loss_of(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The schedule's loss function: the last stage's output is its weighted loss already."""
    return output


class PipelineModule(nn.Module):
    """What a pipeline run trains: this process's stages, driven by a schedule.

    ``train_step(batch, optim_wrapper)`` runs forward and backward of every microbatch through
    the schedule, sums the tied gradients, averages the data-parallel ones, and steps;
    ``forward(batch)`` (evaluation) runs the forward-only schedule. Both return on every stage
    what the last stage computed (the losses to log, the outputs for the metrics).

    Args:
        model: The pruned model (:func:`build_pipeline`).
        stages: This process's :class:`StageModule` s (several with an interleaved schedule).
        pc: The ``parallel`` config.
        device: This process's device.
        groups: The process groups: ``pipeline`` (this pipeline's stages), ``tied`` (first and
            last stage, or None), ``data`` (replicas averaged by hand, or None).
        tied: Names of the parameters the first and last stage both hold.
        last_rank: The global rank of the process holding the last stage.
    """

    def __init__(self, model: nn.Module, stages: list[StageModule], pc: ParallelConfig,
                 device: torch.device, groups: dict[str, Any], tied: list[str],
                 last_rank: int, data_parallel: Any) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)
        self.pc, self.device, self.groups, self.last_rank = pc, device, groups, last_rank
        self.data_parallel = data_parallel
        self._model = [model]  # not registered twice: its parameters are the stages'
        self.tied = [p for n, p in model.named_parameters() if n in tied]
        self.holds_last = any(s.is_last for s in stages)
        self._schedules: dict[Any, Any] = {}
        # FSDP: which sharded modules free their gathered parameters after each forward
        self._reshards = {id(b): pc.reshard_after_forward for s in stages for b in s.blocks}
        self._log_keys: list[str] | None = None
        self.microbatches_used: int | None = None

    # ---------------------------------------------------------------- microbatches
    def microbatches_for(self, batch_size: int, training: bool) -> int:
        """Microbatches for a batch of ``batch_size``: ``parallel.microbatches`` or the largest
        divisor of the batch up to 4 x the stages (in evaluation, a divisor of a short last batch).

        Raises:
            ConfigError: in training, ``parallel.microbatches`` does not divide the batch.
        """
        wanted = self.pc.microbatches
        fits = self._fits if training else (lambda n: True)
        if wanted is not None and training:
            if not fits(wanted):
                raise ConfigError(
                    f"parallel.microbatches={wanted} does not suit "
                    f"pipeline_schedule={self.pc.pipeline_schedule!r} over {self.pc.pipeline} "
                    f"processes: it runs microbatches in rounds of {self.pc.pipeline}, so use a "
                    f"multiple of {self.pc.pipeline} (or fewer than {2 * self.pc.pipeline}).")
            if batch_size % wanted:
                raise ConfigError(
                    f"parallel.microbatches={wanted} does not divide the batch of {batch_size} "
                    f"samples this process trains on: choose a divisor of {batch_size} (e.g. "
                    f"{max(d for d in range(1, batch_size + 1) if batch_size % d == 0 and d <= wanted)}), "
                    f"or a batch_size that {wanted} divides (and drop_last=True, so that the "
                    f"last batch is whole).")
            return wanted
        top = wanted or 4 * self.pc.num_stages
        return max(d for d in range(1, min(top, batch_size) + 1) if batch_size % d == 0 and fits(d))

    def describe_step(self, batch_size: int) -> str:
        """The log line of a training step's microbatches, for a batch of ``batch_size``."""
        n, p = self.microbatches_for(batch_size, training=True), self.pc.num_stages
        chosen = "parallel.microbatches" if self.pc.microbatches else "the default: the largest " \
            f"divisor of the batch up to 4 x {p} stages"
        return (f"Pipeline step: each batch of {batch_size} runs as {n} microbatches of "
                f"{batch_size // n} ({chosen}); the effective batch above is unchanged. Bubble "
                f"(p - 1) / (m + p - 1) = {bubble(p, n):.0%} of each stage's time idle")

    def _fits(self, n: int) -> bool:
        """Whether the training schedule runs ``n`` microbatches: interleaved 1F1B runs them in
        rounds of ``pipeline`` (torch: ``n`` a multiple of ``max(1, n // pipeline)``)."""
        if self.pc.pipeline_schedule != "interleaved_1f1b":
            return True
        return n % max(1, n // self.pc.pipeline) == 0

    def _schedule(self, batch: dict, n: int, training: bool) -> Any:
        """The schedule for batches of this shape (built once per shape: the stages send
        buffers of fixed shapes)."""
        key = (training, n, tuple((k, tuple(v.shape), v.dtype) for k, v in batch.items()
                                   if isinstance(v, torch.Tensor)))
        schedule = self._schedules.get(key)
        if schedule is None:
            from torch.distributed import pipelining

            stages = [pipelining.PipelineStage(s, s.index, s.num_stages, self.device,
                                               group=self.groups["pipeline"]) for s in self.stages]
            multi = len(stages) > 1
            # evaluation runs forward only, in order: GPipe, or looped BFS over several stages
            name = self.pc.pipeline_schedule if training else "looped_bfs" if multi else "gpipe"
            cls = getattr(pipelining, SCHEDULES[name])
            loss_fn = _loss_of if training else None
            schedule = cls(stages if multi else stages[0], n_microbatches=n, loss_fn=loss_fn,
                           scale_grads=False)
            self._schedules[key] = schedule
            for s in self.stages:  # the new schedule's first call of each stage is its probe
                s.probing = True
        return schedule

    # ---------------------------------------------------------------------- training
    def train_step(self, batch: Any, optim_wrapper: Any) -> dict[str, torch.Tensor]:
        """One optimisation step of ``batch`` (this process's share) through the pipeline."""
        from libai.model.steps import to_device

        batch = _as_batch(to_device(batch, self.device))
        size = _batch_size(batch)
        n = self.microbatches_used = self.microbatches_for(size, training=True)
        divisor = optim_wrapper.loss_divisor()
        if optim_wrapper.clip_norm_fn is None:  # the norm of every stage's gradients
            from libai.optim.clip import clip_grad_norm_

            optim_wrapper.clip_norm_fn = partial(
                clip_grad_norm_, combine=self._combine_norm,
                skip=self.tied if not any(s.is_first for s in self.stages) else ())
        model = self._model[0]
        totals = self._item_totals(model, batch)
        for stage in self.stages:
            stage.records.clear()
            stage.weigh = _Weigher(totals, size, divisor, self.data_parallel.size, model) \
                if stage.is_last else None
        schedule = self._schedule(batch, n, training=True)
        target = torch.arange(size, device=self.device)  # the schedule splits it: unused
        earlier = self._set_aside_grads()
        with optim_wrapper.optim_context(self), self._loss_parallel():
            schedule.step(target=target, return_outputs=False, **batch)
        self._reduce_grads(earlier)
        logs = self._share(self._logs())
        optim_wrapper.update_after_backward()
        return logs

    def _combine_norm(self, norm: torch.Tensor, norm_type: float) -> torch.Tensor:
        """The gradient norm over the stages of the pipeline, from this process's."""
        import torch.distributed as tdist

        group = self.groups["pipeline"]
        if math.isinf(norm_type):
            norm = norm.clone()
            tdist.all_reduce(norm, op=tdist.ReduceOp.MAX, group=group)
            return norm
        power = norm.double() ** norm_type
        tdist.all_reduce(power, group=group)
        return (power ** (1.0 / norm_type)).to(norm.dtype)

    def _loss_parallel(self) -> Any:
        if self.pc.tensor == 1:
            return contextlib.nullcontext()
        from torch.distributed.tensor.parallel import loss_parallel

        return loss_parallel()

    def _item_totals(self, model: nn.Module, batch: dict) -> dict[str, torch.Tensor] | None:
        """The items each ``num_items`` loss is a mean over, in the whole step's batch (all data
        shares): one all-reduce. None when the model does not count them."""
        count = getattr(model, "count_items", None)
        if count is None:
            return None
        from libai.utils.dist import all_reduce_sum

        items = count(batch)
        keys = sorted(items)
        local = torch.stack([torch.as_tensor(items[k], dtype=torch.float64, device=self.device)
                             for k in keys])
        total = all_reduce_sum(local) / self.data_parallel.replicas  # replicas count once
        return dict(zip(keys, total.unbind()))

    def _logs(self) -> dict[str, torch.Tensor] | None:
        """The last stage's values to log, summed over its microbatches (each weighed)."""
        if not self.holds_last:
            return None
        records = next(s for s in self.stages if s.is_last).records
        logs: dict[str, torch.Tensor] = {}
        for record in records:
            for key, value in record.items():
                logs[key] = logs[key] + value if key in logs else value
        return logs

    def _share(self, logs: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        """The last stage's logs on every stage (one broadcast; the names once)."""
        import torch.distributed as tdist

        group = self.groups["pipeline"]
        if self._log_keys is None:
            box = [sorted(logs) if logs is not None else None]
            tdist.broadcast_object_list(box, src=self.last_rank, group=group)
            self._log_keys = box[0]
        keys = self._log_keys
        values = torch.stack([logs[k].float() for k in keys]) if logs is not None else \
            torch.empty(len(keys), device=self.device)
        tdist.broadcast(values, src=self.last_rank, group=group)
        return dict(zip(keys, values.unbind()))

    def _reduced(self) -> list[tuple[nn.Parameter, Any, bool]]:
        """(parameter, group, average) for each gradient reduced after a step: the tied ones
        summed over the first and last stage; without FSDP all of them averaged over the
        data-parallel replicas (no DDP wraps a stage)."""
        out = [(p, self.groups["tied"], False) for p in self.tied] \
            if self.groups.get("tied") is not None else []
        if self.groups.get("data") is not None:
            out += [(p, self.groups["data"], True) for p in self._model[0].parameters()
                    if p.requires_grad]
        return out

    def _set_aside_grads(self) -> list[torch.Tensor | None]:
        """The gradients to reduce, as accumulated so far (None each); the step then accumulates
        into fresh ones, and only its own part is reduced (:meth:`_reduce_grads`). The
        gradients are thus reduced after every step, also inside an accumulation window, and a
        checkpoint saved there holds the same tied gradients on both stages."""
        earlier = []
        for param, _, _ in self._reduced():
            earlier.append(param.grad)
            param.grad = None
        return earlier

    def _reduce_grads(self, earlier: list[torch.Tensor | None]) -> None:
        import torch.distributed as tdist

        by_group: dict[Any, list[tuple[torch.Tensor, bool]]] = {}
        for (param, group, average), before in zip(self._reduced(), earlier):
            if param.grad is None:  # nothing reached it this step (frozen, or no item)
                param.grad = before
                continue
            grad = param.grad
            if type(grad).__name__ == "DTensor" and grad.placements != param.placements:
                # a vocabulary-split embedding's lookup leaves a replicated gradient: its part
                param.grad = grad.redistribute(grad.device_mesh, param.placements)
            by_group.setdefault(group, []).append((_local(param.grad), average))
        for group, grads in by_group.items():
            from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

            tensors = [g for g, _ in grads]
            flat = _flatten_dense_tensors(tensors)
            tdist.all_reduce(flat, group=group)
            if grads[0][1]:
                flat.div_(tdist.get_world_size(group))
            for grad, reduced in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
                grad.copy_(reduced)
        for (param, _, _), before in zip(self._reduced(), earlier):
            if before is not None and param.grad is not before:
                param.grad += before

    # -------------------------------------------------------------------- evaluation
    @contextlib.contextmanager
    def _gathered_once(self) -> Any:
        """Under FSDP, each sharded module gathered once for all of a batch's microbatches, and
        sharded again after: the data shares' last batches differ in size, so in microbatches,
        and a gather per microbatch would leave the processes of a shard group out of step."""
        from torch.distributed.fsdp import FSDPModule

        sharded = [m for s in self.stages for m in s.modules() if isinstance(m, FSDPModule)]
        if not sharded:
            yield
            return
        for module in sharded:
            module.set_reshard_after_forward(False, recurse=False)
        try:
            yield
        finally:
            for module in sharded:
                module.reshard()
                module.set_reshard_after_forward(self._reshards.get(id(module), False),
                                                 recurse=False)
    def forward(self, batch: Any) -> Any:
        """Evaluate ``batch`` through the forward-only schedule; the outputs on every stage."""
        if self.training:
            raise TrainingError("A pipeline trains through train_step(batch, optim_wrapper) (the "
                                "runner's train step), not by calling the model.")
        from libai.model.steps import to_device

        batch = _as_batch(to_device(batch, self.device))
        size = _batch_size(batch)
        n = self.microbatches_for(size, training=False)
        for stage in self.stages:
            stage.records.clear()
            stage.weigh = None
        schedule = self._schedule(batch, n, training=False)
        with self._gathered_once():
            schedule.step(return_outputs=False, **batch)
        merged = None
        if self.holds_last:
            merged = merge_outputs(next(s for s in self.stages if s.is_last).records)
        import torch.distributed as tdist

        box = [merged]
        tdist.broadcast_object_list(box, src=self.last_rank, group=self.groups["pipeline"])
        return box[0]


class _Weigher:
    """Turns the last part's outputs on a microbatch into its share of the step's loss.

    A loss term with ``num_items`` weighs ``items * shares / total items`` (the total over every
    microbatch and data share: ``totals``), another ``samples / batch``; both divided by the
    accumulation window. The weighted terms sum to the loss whose gradient, summed over the
    microbatches (and averaged over the data shares), is one process's on the whole batch.
    """

    def __init__(self, totals: dict | None, batch_size: int, divisor: int, shares: int,
                 model: nn.Module) -> None:
        self.totals, self.batch_size, self.divisor, self.shares = totals, batch_size, divisor, shares
        self.name = type(model).__name__

    def __call__(self, outputs: Any, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if isinstance(outputs, torch.Tensor):
            outputs = {"loss": outputs}
        if not isinstance(outputs, Mapping):
            raise TrainingError(f"In train mode {self.name}.pipeline_last returned "
                                f"{type(outputs).__name__}; it must return a dict with a 'loss' "
                                f"entry, as forward does.")
        items = outputs.get("num_items") or {}
        if items and (self.totals is None or set(items) - set(self.totals)):
            raise TrainingError(
                f"{self.name} returns num_items for {sorted(items)}: a pipeline weighs those "
                f"losses by their items before any microbatch runs, so the model must count them "
                f"from the batch alone: give it count_items(batch) -> {{loss key: count}} "
                f"(libai.model.contract).")
        share = _batch_size(batch) / self.batch_size
        loss, logs, total = None, {}, None
        for key, value in outputs.items():
            if key == "num_items" or not isinstance(value, torch.Tensor):
                continue
            value = value.mean() if value.ndim else value
            if key in items:
                weight = items[key].to(torch.float64) * self.shares / self.totals[key].clamp(min=1)
                weight = weight.to(value.dtype)
            else:
                weight = share
            weighted = value * weight
            logs[key] = weighted.detach()
            if "loss" in key:
                loss = weighted if loss is None else loss + weighted
                total = logs[key] if total is None else total + logs[key]
        if loss is None:
            raise TrainingError(f"In train mode {self.name} returned keys {sorted(outputs)}, none "
                                f"of which contains 'loss'.")
        logs["loss"] = total
        return (loss / self.divisor if self.divisor != 1 else loss).float(), logs


def merge_outputs(records: list[Any]) -> Any:
    """One batch's evaluation outputs from its microbatches': per-sample tensors concatenated,
    ``num_items`` summed, a 0-d loss averaged by its items (``num_items``) or its samples."""
    if not records:
        return None
    first = records[0]
    if not isinstance(first, Mapping):
        return torch.cat(records) if isinstance(first, torch.Tensor) and first.ndim else first
    sizes = [_batch_size(r) for r in records]
    items = [r.get("num_items") or {} for r in records]
    out: dict[str, Any] = {}
    for key, value in first.items():
        values = [r[key] for r in records]
        if key == "num_items":
            out[key] = {k: sum(i[k] for i in items) for k in value}
        elif isinstance(value, torch.Tensor) and value.ndim:
            out[key] = torch.cat(values)
        elif isinstance(value, torch.Tensor):
            weights = [i[key] for i in items] if all(key in i for i in items) else sizes
            weights = torch.stack([torch.as_tensor(w, dtype=torch.float64) for w in weights])
            stacked = torch.stack(values).to(torch.float64)
            out[key] = ((stacked * weights).sum() / weights.sum().clamp(min=1)).to(value.dtype)
        else:
            out[key] = value
    return out


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if type(t).__name__ == "DTensor" else t


def _as_batch(batch: Any) -> dict:
    if not isinstance(batch, Mapping):
        raise TrainingError(f"parallel.pipeline splits a batch into microbatches by key: the "
                            f"data loader must yield a dict of tensors, got {type(batch).__name__}.")
    return dict(batch)


def _batch_size(batch: Any) -> int:
    """The leading dimension of the first tensor with one."""
    for value in (batch.values() if isinstance(batch, Mapping) else [batch]):
        if isinstance(value, torch.Tensor) and value.ndim:
            return value.shape[0]
    return 1


PIPELINE_ATTR = "_libai_pipeline_stages"  # on a pruned model: the stages it holds


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
    setattr(model, PIPELINE_ATTR, tuple(mine))
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


def compile_blocks(module: PipelineModule, options: dict[str, Any]) -> int:
    """Graph mode under a pipeline: ``torch.compile`` each block's forward (after activation
    checkpointing, which it then includes); returns how many."""
    blocks = [block for stage in module.stages for block in stage.blocks]
    for block in blocks:
        block.forward = torch.compile(block.forward, **options)
    return len(blocks)
