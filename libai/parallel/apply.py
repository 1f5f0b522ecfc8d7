"""Apply a :class:`~libai.parallel.config.ParallelConfig` to a model: the device mesh, activation
checkpointing, tensor parallel, then FSDP2 or DDP, in that order (torchtitan's order: each step
wraps what the previous one produced).

The model says how it can be split, as data (STYLE.md rule 13):

- ``parallel_blocks``: class names of its repeated blocks. FSDP shards each block on its own (its
  parameters are gathered just before its forward and freed after), and the "blocks" policy of
  activation checkpointing recomputes each block's activations in the backward.
- ``tp_plan`` on a block class: ``{submodule path: "colwise" | "rowwise" | "vocab"}``,
  Megatron-LM's split of attention and MLP: q/k/v and the first MLP layer by output features
  (each process keeps whole heads), the output projections by input features, one all-reduce per
  sub-layer; "vocab" splits an embedding by vocabulary rows (the tied LM head then produces
  vocabulary-split logits, and the loss is computed on them in place: ``loss_parallel``).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from libai.model.blocks import find_blocks
from libai.utils import dist
from libai.utils.errors import ConfigError

from .config import CPU_OFFLOAD_WITHOUT_FSDP, ParallelConfig

__all__ = ["build_mesh", "find_blocks", "apply_activation_checkpointing", "apply_tensor_parallel",
           "checkpoint_and_split_layers",
           "parallelize", "build_on_rank0", "in_loss_parallel"]


def build_mesh(pc: ParallelConfig, device_type: str) -> Any:
    """A DeviceMesh with one named dimension per size > 1 (pipeline, data, fsdp, tensor; tensor
    innermost, so that tensor-parallel peers are neighbouring ranks, on one node), or None for
    one process; with ``one_process_fsdp``, an "fsdp" dimension of one (its process group made
    here when no launcher made one)."""
    if pc.world_size == 1 and not pc.one_process_fsdp:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    if pc.one_process_fsdp:
        _one_process_group(device_type)
        return init_device_mesh(device_type, (1,), mesh_dim_names=("fsdp",))
    names = tuple(n for n in ("pipeline", "data", "fsdp", "tensor") if getattr(pc, n) > 1)
    return init_device_mesh(device_type, tuple(getattr(pc, n) for n in names), mesh_dim_names=names)


def _one_process_group(device_type: str) -> None:
    """The default process group of this one process (a store in memory: no port, no launcher),
    unless there is one; tools/train.py leaves it at the end (destroy_dist)."""
    import importlib

    if dist.is_distributed():
        return
    importlib.import_module("torch.distributed.nn.functional")  # as libai.utils.dist.init_dist
    torch.distributed.init_process_group(backend="nccl" if device_type == "cuda" else "gloo",
                                         store=torch.distributed.HashStore(), rank=0,
                                         world_size=1)


def _checkpointed_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import checkpoint

    # the class's forward, looked up at call time: a deep copy of the module (graph mode's
    # reference copy) rebinds this method to the copy, never to the original
    return checkpoint(type(self).forward, self, *args, use_reentrant=False, **kwargs)


def apply_activation_checkpointing(model: nn.Module, value: Any,
                                   default_blocks: tuple[str, ...] | None = None) -> list[str]:
    """Recompute the activations of the chosen modules in the backward instead of keeping them.

    ``value``: None (off), "blocks" (the model's blocks), or ``dict(modules=[class names])``.
    The math is unchanged (the RNG state is replayed, so dropout draws the same masks); the state
    dict keys are unchanged (the module's forward is replaced, no wrapper module is added).
    Returns the class names wrapped, for the log.
    """
    if value is None or value is False:
        return []
    if value == "blocks" or value is True:
        names, key = default_blocks, "activation_checkpointing='blocks'"
        if not (names or getattr(model, "parallel_blocks", None)):
            raise ConfigError(
                f"activation_checkpointing='blocks': {type(model).__name__} declares no "
                f"parallel_blocks; name the modules: activation_checkpointing="
                f"dict(modules=['MyBlock']).")
    elif isinstance(value, Mapping) and set(value) == {"modules"}:
        names, key = value["modules"], "activation_checkpointing.modules"
        if isinstance(names, str):
            names = [names]
    else:
        raise ConfigError(f"activation_checkpointing={value!r}: expected None, 'blocks' or "
                          f"dict(modules=['BlockClassName', ...]).")
    blocks = find_blocks(model, names, key)
    for block in blocks:
        block.forward = types.MethodType(_checkpointed_forward, block)
    return sorted({type(b).__name__ for b in blocks})


def apply_tensor_parallel(model: nn.Module, tp_mesh: Any, src_data_rank: int | None = 0) -> int:
    """Split every module that declares a ``tp_plan`` over ``tp_mesh``; returns the number of
    layers split.

    A ``tp_plan`` is a class attribute ``{submodule path: "colwise" | "rowwise"}`` relative to the
    module (``TransformerBlock`` has one). A module may also declare ``tp_divisible``
    (``{config path: count}``): counts the tensor size must divide, checked before any split.
    ``src_data_rank``: the rank whose weights every process gets its part of (None: each splits
    its own, as ``rank0_init`` needs).
    """
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    styles = {
        "colwise": ColwiseParallel,
        "rowwise": RowwiseParallel,
        # an embedding split by vocabulary rows: token ids in whole, each process looks up the
        # rows it holds and one all-reduce sums the partial embeddings
        "vocab": lambda: RowwiseParallel(input_layouts=Replicate()),
    }
    planned = [m for m in model.modules() if getattr(m, "tp_plan", None)]
    if not planned:
        raise ConfigError(
            f"parallel.tensor={tp_mesh.size()}: no module of {type(model).__name__} declares a "
            f"tp_plan, so libai does not know how to split its layers. Use parallel.fsdp "
            f"instead, or give the block class a plan such as tp_plan = "
            f"{{'attn.q_proj': 'colwise', 'attn.out_proj': 'rowwise'}} (see docs/parallel.md).")
    _check_divisible(planned, tp_mesh.size())
    count = 0
    for module in planned:
        plan = {}
        for path, style in module.tp_plan.items():
            if style not in styles:
                raise ConfigError(f"{type(module).__name__}.tp_plan[{path!r}]={style!r}: expected "
                                  f"'colwise', 'rowwise' or 'vocab'.")
            plan[path] = styles[style]()
        parallelize_module(module, tp_mesh, plan, src_data_rank=src_data_rank)
        count += len(plan)
    return count


def _check_divisible(planned: list[nn.Module], size: int) -> None:
    """Refuse a tensor-parallel size that does not divide a count a module declares in
    ``tp_divisible`` ({config path: count}, e.g. Llama's query and key/value heads): each process
    must hold whole heads, or the split layers would compute something else."""
    counts = {path: n for m in planned for path, n in getattr(m, "tp_divisible", {}).items()}
    for path, n in counts.items():
        if n % size:
            fits = [d for d in range(1, n + 1) if all(c % d == 0 for c in counts.values())]
            raise ConfigError(
                f"parallel.tensor={size} does not divide {path}={n}: each tensor-parallel process "
                f"holds whole heads; choose parallel.tensor among {fits} (the divisors of "
                f"{', '.join(f'{p}={c}' for p, c in counts.items())}).")


def parallelize(model: nn.Module, pc: ParallelConfig, mesh: Any, device: torch.device, *,
                param_dtype: torch.dtype | None = None, activation_checkpointing: Any = None,
                ddp_kwargs: Mapping | None = None) -> tuple[nn.Module, list[str]]:
    """Wrap ``model`` as ``pc`` says; returns the model to train and lines for the log.

    Args:
        model: The model, on ``device``.
        pc: The checked ``parallel`` config.
        mesh: :func:`build_mesh`'s mesh (None for one process).
        device: The process's device.
        param_dtype: FSDP2 computes in this dtype (from the AMP settings); gradients are reduced
            in float32. Defaults to None (the parameters' own dtype).
        activation_checkpointing: The config value (see :func:`apply_activation_checkpointing`).
        ddp_kwargs: Extra DistributedDataParallel arguments (``model_wrapper_cfg``).
    """
    lines = [pc.describe()]
    if pc.cpu_offload and not pc.sharded_by_fsdp:
        raise ConfigError(CPU_OFFLOAD_WITHOUT_FSDP)
    if pc.cpu_offload and device.type == "cpu" and not pc.one_process_fsdp:
        raise ConfigError("parallel.cpu_offload=True moves parameters and optimizer state from "
                          "the GPU to the host, and this run is on the CPU already: leave it out.")
    rank0_init = pc.splits_from_rank0
    if rank0_init:  # split on the meta device; rank 0 keeps its whole weights on the host
        tied = _tied_names(model)
        whole = _host_copy(model) if dist.get_rank() == 0 else ({}, {})
        model.to("meta")
    lines += checkpoint_and_split_layers(model, pc, mesh, activation_checkpointing,
                                         src_data_rank=None if rank0_init else 0)
    if pc.one_process_fsdp:
        _fully_shard(model, pc, mesh, param_dtype, pin_memory=device.type == "cuda")
        offload = ""
        if pc.cpu_offload and device.type == "cpu":
            offload = (", cpu_offload on a CPU run: the offload policy runs, and nothing moves "
                       "(the parameters are on the host already)")
        elif pc.cpu_offload:
            offload = (": parameters, gradients and optimizer state on the host, each block's "
                       "parameters copied to the device for its forward and backward")
        lines.append(f"FSDP2 on a one-process mesh{offload}")
    elif pc.fsdp > 1:
        _fully_shard(model, pc, mesh, param_dtype)
        lines.append(f"FSDP2: parameters, gradients and optimizer state sharded over {pc.fsdp} "
                     f"processes" + (f", replicated {pc.data} times" if pc.data > 1 else ""))
    if rank0_init:  # FSDP's CPU offload keeps the parameters on the host
        model.to_empty(device="cpu" if pc.cpu_offload else device)
        _retie(model, tied)
        _receive_from_rank0(model, *whole, sharded=pc.fsdp > 1 or pc.tensor > 1)
        lines.append("rank0_init: rank 0 built the model and sent each process its part")
    if pc.fsdp == 1 and pc.data > 1 and any(p.requires_grad for p in model.parameters()):
        from libai.model.wrappers import wrap_ddp

        model = wrap_ddp(model, device, **dict(ddp_kwargs or {}))
    return model, lines


def checkpoint_and_split_layers(model: nn.Module, pc: ParallelConfig, mesh: Any,
                                activation_checkpointing: Any,
                                src_data_rank: int | None = 0) -> list[str]:
    """Activation checkpointing, then tensor parallel, as ``pc`` says; lines for the log. The
    first two steps of :func:`parallelize`, and of a pipeline stage's (libai.parallel.pipeline).

    Raises:
        ConfigError: tensor parallel with a data dimension but no FSDP (DDP cannot wrap DTensors).
    """
    lines = []
    wrapped = apply_activation_checkpointing(model, activation_checkpointing, pc.blocks)
    if wrapped:
        lines.append(f"Activation checkpointing: {', '.join(wrapped)} recomputed in the backward")
    if pc.tensor > 1:
        if pc.data > 1 and pc.fsdp == 1:
            pipeline = f"pipeline={pc.pipeline}, " if pc.pipeline > 1 else ""
            raise ConfigError(
                f"parallel: data={pc.data} with tensor={pc.tensor} needs fsdp for the data "
                f"dimension: use parallel=dict({pipeline}fsdp={pc.data}, tensor={pc.tensor}).")
        n = apply_tensor_parallel(model, mesh["tensor"], src_data_rank=src_data_rank)
        lines.append(f"Tensor parallel: {n} layers split over {pc.tensor} processes")
    return lines


def build_on_rank0(build: Callable[[], nn.Module], pc: ParallelConfig) -> nn.Module:
    """``build()`` on rank 0; on the other ranks under ``torch.device("meta")`` when
    ``pc.rank0_init`` (shapes only: no memory, no random numbers drawn). :func:`parallelize`
    then gives every rank its part of rank 0's weights."""
    if not pc.splits_from_rank0:
        return build()
    if dist.get_rank() == 0:
        model, found = build(), []
    else:
        with torch.device("meta"):
            model = build()
        found = _plain_tensors(model)
    found = [name for names in dist.all_gather_object(found) for name in names]  # all stop alike
    if found:
        raise ConfigError(
            f"parallel.rank0_init: {type(model).__name__} keeps tensors that are neither "
            f"parameters nor buffers ({', '.join(sorted(set(found)))}), so rank 0 cannot send "
            f"them. Register each one as a buffer (self.register_buffer(name, tensor, "
            f"persistent=False)), or set parallel.rank0_init=False.")
    return model


def _plain_tensors(model: nn.Module) -> list[str]:
    """Attributes holding a tensor that is neither a parameter nor a buffer."""
    return [f"{name}.{attr}" if name else attr for name, module in model.named_modules()
            for attr, value in vars(module).items()
            if isinstance(value, torch.Tensor)]


def _host_copy(model: nn.Module) -> tuple[dict, dict]:
    """Rank 0's state dict and all its buffers (non-persistent ones too), on the host."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    buffers = {k: v.detach().cpu() for k, v in model.named_buffers()}
    return state, buffers


def _receive_from_rank0(model: nn.Module, state: dict, buffers: dict, sharded: bool) -> None:
    """Fill the model (given memory by ``to_empty`` on every rank) with rank 0's values: each
    process its part of the parameters when they are split, whole ones otherwise, and every
    buffer."""
    main = dist.get_rank() == 0
    if sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, state, options=StateDictOptions(
            full_state_dict=True, broadcast_from_rank0=True))
    else:
        if main:
            model.load_state_dict(state)
        for param in model.parameters():
            torch.distributed.broadcast(param.data, src=0)
    with torch.no_grad():
        for name, buffer in model.named_buffers():  # non-persistent ones are not in the state
            if main:
                buffer.copy_(buffers[name])
            torch.distributed.broadcast(buffer, src=0)


def _tied_names(model: nn.Module) -> list[list[str]]:
    """Parameter names that share one tensor (a tied LM head), grouped."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def _retie(model: nn.Module, tied: list[list[str]]) -> None:
    """``to_empty`` gives each use of a shared meta parameter its own tensor: share it again."""
    for first, *others in tied:
        param = model.get_parameter(first)
        for name in others:
            owner, _, attr = name.rpartition(".")
            setattr(model.get_submodule(owner) if owner else model, attr, param)


def _fully_shard(model: nn.Module, pc: ParallelConfig, mesh: Any,
                 param_dtype: torch.dtype | None, pin_memory: bool = True) -> None:
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    fsdp_mesh = mesh["data", "fsdp"] if pc.data > 1 else mesh["fsdp"]  # 2-D: HSDP
    options: dict[str, Any] = dict(mesh=fsdp_mesh)
    if param_dtype is not None:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype,
                                                    reduce_dtype=torch.float32)
    if pc.cpu_offload:
        options["offload_policy"] = CPUOffloadPolicy(pin_memory=pin_memory)
    blocks = find_blocks(model, pc.blocks)
    for block in blocks:
        fully_shard(block, reshard_after_forward=pc.reshard_after_forward, **options)
    # the root holds what is left (embeddings, heads); it is not resharded after the forward:
    # the backward needs it first
    fully_shard(model, reshard_after_forward=False if blocks else pc.reshard_after_forward,
                **options)


def in_loss_parallel(step: Callable[..., Any]) -> Callable[..., Any]:
    """``step`` (forward, loss, backward) inside ``loss_parallel()``: a cross-entropy of
    vocabulary-split logits (a "vocab" split embedding with a tied head) is computed on the
    splits, forward and backward, without gathering the (B, S, V) logits."""
    from torch.distributed.tensor.parallel import loss_parallel

    def run(*args: Any, **kwargs: Any) -> Any:
        with loss_parallel():
            return step(*args, **kwargs)

    return run

