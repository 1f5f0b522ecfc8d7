"""What a pipeline run trains and evaluates: :class:`PipelineModule` drives this process's
stages (libai.parallel.pipeline cuts them) through a schedule of ``torch.distributed.pipelining``.

Training: each microbatch's loss is weighed on the last stage (:class:`~libai.parallel.pipeline_outputs.Weigher`) so that the
summed gradients are one process's on the whole batch; after the schedule the tied gradients are
summed over the first and last stage, the data-parallel ones averaged, and the optimizer wrapper
steps. Evaluation: the forward-only schedule, the microbatch outputs merged on the last stage
(:func:`merge_outputs`) and sent to every stage, so the evaluation loop and its metrics see what
one process would.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from libai.utils.errors import ConfigError, TrainingError

from .config import SCHEDULES, ParallelConfig
from .pipeline_outputs import Weigher, batch_size_of, merge_outputs

if TYPE_CHECKING:
    from .stage import StageModule

__all__ = ["PipelineModule", "bubble", "merge_outputs"]


def bubble(stages: int, microbatches: int) -> float:
    """The idle share of a pipeline step, (p - 1) / (m + p - 1), for p stages, m microbatches."""
    return (stages - 1) / (microbatches + stages - 1)


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
        batch = self._prepare(batch, training=True)
        size = batch_size_of(batch)
        n = self.microbatches_used = self.microbatches_for(size, training=True)
        divisor = optim_wrapper.loss_divisor()
        model = self._model[0]
        totals = self._item_totals(model, batch)
        for stage in self.stages:
            stage.records.clear()
            stage.weigh = Weigher(totals, size, divisor, self.data_parallel.size, model) \
                if stage.is_last else None
        schedule = self._schedule(batch, n, training=True)
        target = torch.arange(size, device=self.device)  # the schedule splits it: unused
        earlier = self._set_aside_grads()
        with optim_wrapper.optim_context(self), self._loss_parallel():
            schedule.step(target=target, return_outputs=False, **batch)
        self._reduce_grads(earlier)
        logs = self._share(self._logs())
        optim_wrapper.update_params(None)  # the schedule ran the backward
        return logs

    def combine_norm(self, norm: torch.Tensor, norm_type: float) -> torch.Tensor:
        """The gradient norm over the stages of the pipeline, from this process's (the execution
        record's ``combine_norm``: the optimizer wrapper's clip reads it)."""
        import torch.distributed as tdist

        group = self.groups["pipeline"]
        if math.isinf(norm_type):
            norm = norm.clone()
            tdist.all_reduce(norm, op=tdist.ReduceOp.MAX, group=group)
            return norm
        power = norm.double() ** norm_type
        tdist.all_reduce(power, group=group)
        return (power ** (1.0 / norm_type)).to(norm.dtype)

    def _prepare(self, batch: Any, training: bool) -> dict:
        """The batch on this process's device, through the model's ``data_preprocessor`` when it
        has one (as the default steps do)."""
        from libai.model.steps import _mover, to_device

        move = _mover(self._model[0], training, self.device)
        return _as_batch(move(batch) if move is not None else to_device(batch, self.device))

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
        batch = self._prepare(batch, training=False)
        size = batch_size_of(batch)
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


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if type(t).__name__ == "DTensor" else t


def _as_batch(batch: Any) -> dict:
    if not isinstance(batch, Mapping):
        raise TrainingError(f"parallel.pipeline splits a batch into microbatches by key: the "
                            f"data loader must yield a dict of tensors, got {type(batch).__name__}.")
    return dict(batch)
