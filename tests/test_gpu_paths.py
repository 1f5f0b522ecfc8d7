"""Checks that only mean something on CUDA (the ``gpu`` marker: skipped where torch sees no GPU;
``benchmarks/gpu_check.py`` runs them first on a GPU machine). Each trains
``configs/digits_mlp.py`` in this process for a few steps on ``cuda``: float16 with its
GradScaler saved and resumed, the CUDA RNG state in the checkpoint, pinned-memory loaders, the
memory figure in the log, NCCL in one process.

Written without a GPU at hand (no device was lent when they were written): the first GPU run
says whether they hold.
"""

import sys
from pathlib import Path

import pytest
import torch

from libai.checkpoint import load_checkpoint
from libai.config import Config
from libai.runner import Runner

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]


def digits(tmp_path, **options):
    cfg = Config.fromfile(str(ROOT / "configs" / "digits_mlp.py"))
    cfg.device = "cuda"
    cfg.work_dir = str(tmp_path / "work")
    cfg.train_cfg.max_iters = 4
    cfg.train_cfg.val_interval = 100
    cfg.default_hooks.checkpoint.interval = 2
    cfg.default_hooks.logger.interval = 1
    cfg.default_hooks.logger.plot = False
    for key, value in options.items():
        cfg[key] = value
    return cfg


def straight_and_resumed(tmp_path, **options):
    """The iter_4 checkpoints of a straight run to 4 and of a run resumed from its iter_2."""
    straight = Runner.from_cfg(digits(tmp_path / "a", **options))
    straight.train()
    first = Path(straight.work_dir)
    resumed = Runner.from_cfg(digits(tmp_path / "b", **options, resume=str(first / "iter_2.pth")))
    resumed.train()
    return (load_checkpoint(first / "iter_4.pth"),
            load_checkpoint(Path(resumed.work_dir) / "iter_4.pth"))


def test_float16_loss_scale_is_saved_and_resumed(tmp_path):
    wrapper = dict(type="AmpOptimWrapper", dtype="float16", optimizer=dict(type="AdamW", lr=1e-3))
    a, b = straight_and_resumed(tmp_path, optim_wrapper=wrapper)
    scaler = a["optimizer"]["loss_scaler"]
    assert scaler["scale"] > 0
    assert b["optimizer"]["loss_scaler"] == scaler  # scale, growth tracker: as if never stopped


def test_the_cuda_rng_state_is_saved_and_restored(tmp_path):
    """digits_mlp has dropout: the CUDA generator advances every step, and a resumed run must
    end where the straight one does."""
    a, b = straight_and_resumed(tmp_path)
    assert len(a["rng"][0]["cuda"]) == torch.cuda.device_count()
    assert torch.equal(a["rng"][0]["cuda"][0], b["rng"][0]["cuda"][0])


def test_a_pinned_memory_loader_gives_pinned_batches(tmp_path):
    cfg = digits(tmp_path)
    cfg.train_dataloader.pin_memory = True
    runner = Runner.from_cfg(cfg)
    batch = next(iter(runner.train_dataloader))
    tensors = batch.values() if isinstance(batch, dict) else batch
    assert all(t.is_pinned() for t in tensors if isinstance(t, torch.Tensor))


def test_the_log_shows_peak_memory_on_cuda(tmp_path, caplog):
    runner = Runner.from_cfg(digits(tmp_path))
    runner.train()
    log = next(Path(runner.log_dir).glob("*.log")).read_text()
    assert "memory: " in log  # LoggerHook: torch.cuda.max_memory_allocated, MiB


def test_nccl_in_one_process_trains(tmp_path, monkeypatch):
    """One process under torchrun's environment: the default backend on CUDA is NCCL."""
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29533")):
        monkeypatch.setenv(key, value)
    runner = Runner.from_cfg(digits(tmp_path))
    try:
        runner.train()
        assert torch.distributed.get_backend() == "nccl"
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def test_the_log_shows_mfu_where_the_gpu_peak_is_known(tmp_path):
    from libai.hooks.throughput_hook import device_peak_tflops

    runner = Runner.from_cfg(digits(tmp_path))
    runner.train()
    log = next(Path(runner.log_dir).glob("*.log")).read_text()
    if device_peak_tflops(runner.device, half=False) is None:
        pytest.fail(f"{torch.cuda.get_device_name()}: no dense peak known; add it to the table")
    assert "MFU" in log


def test_bf16_attention_runs_a_fused_sdpa_kernel():
    """BERT's bf16 training step on CUDA takes flash, memory-efficient or cuDNN attention, not
    the math fallback (benchmarks/gpu.py's sdpa pass reports which on BERT-large)."""
    import importlib.util

    from torch.profiler import ProfilerActivity, profile

    from libai.model import BertForPreTraining

    spec = importlib.util.spec_from_file_location("libai_gpu_bench", ROOT / "benchmarks" / "gpu.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["libai_gpu_bench"] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    model = BertForPreTraining(vocab_size=512, hidden_size=256, num_layers=2, num_heads=4,
                               ffn_hidden_size=1024, max_position_embeddings=128).cuda()
    ids = torch.randint(1, 512, (4, 128), device="cuda")
    batch = dict(input_ids=ids, attention_mask=torch.ones_like(ids),
                 token_type_ids=torch.zeros_like(ids), mlm_labels=ids.clone(),
                 next_sentence_label=torch.zeros(4, dtype=torch.long, device="cuda"))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            sum(v for k, v in model(batch).items() if k.endswith("loss")).backward()
    ops = [e.key for e in prof.key_averages() if "attention" in e.key and e.key.startswith("aten::_")]
    assert bench.sdpa_kernel(ops) not in ("math", "none found"), ops


def test_fsdp2_bf16_policy_computes_in_bf16_and_keeps_float32_shards(monkeypatch):
    """The engine's FSDP2 policy on a one-process NCCL mesh (as benchmarks/gpu.py's fsdp1 entry):
    the blocks compute with bfloat16 parameters, the sharded parameters stay float32."""
    from torch.distributed.device_mesh import init_device_mesh

    from libai.model import BertForPreTraining
    from libai.parallel import parse_parallel
    from libai.parallel.apply import _fully_shard

    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29534")):
        monkeypatch.setenv(key, value)
    torch.distributed.init_process_group("nccl")
    try:
        model = BertForPreTraining(vocab_size=128, hidden_size=64, num_layers=2, num_heads=4,
                                   ffn_hidden_size=128, max_position_embeddings=64).cuda()
        mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("fsdp",))
        _fully_shard(model, parse_parallel(dict(fsdp=1), 1), mesh, torch.bfloat16)
        seen = []
        linear = next(m for m in model.modules() if isinstance(m, torch.nn.Linear))
        linear.register_forward_pre_hook(lambda m, args: seen.append(m.weight.dtype))
        assert {p.dtype for p in model.parameters()} == {torch.float32}  # the shards
        ids = torch.randint(1, 128, (2, 16), device="cuda")
        model.eval()(dict(input_ids=ids, attention_mask=torch.ones_like(ids)))
        assert seen == [torch.bfloat16]  # what the block computed with
    finally:
        torch.distributed.destroy_process_group()
