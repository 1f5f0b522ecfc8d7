"""Exact resume on CUDA, said honestly (docs/reliability.md, "Exact resume: which device").

On the CPU a resumed run is bit-identical to an uninterrupted one. On CUDA it is with
``randomness=dict(deterministic=True)``, which turns on what exactness needs there: deterministic
kernels, cuBLAS's fixed workspace (``CUBLAS_WORKSPACE_CONFIG``) and cuDNN without autotuning;
the CUDA RNG state is in every checkpoint. Without it a resumed run on CUDA is within float
tolerance of the uninterrupted one (kernels that add with atomics differ in the last bits).

The resume proofs compare the run's math, not the machine's measurements: on CUDA the log has a
peak-memory figure, the process's peak so far, which differs between two runs of one process.
"""

import itertools
import os

import pytest
import resume_helpers as rh
import torch

from libai.checkpoint import load_checkpoint
from libai.hooks.logger_hook import LoggerHook
from libai.runner import Runner, env

N, K = 8, 4


@pytest.fixture
def determinism_put_back(monkeypatch):
    """What seed_everything(deterministic=True) changes for the process, put back afterwards."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    saved = (torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved[2:]


def test_resume_proofs_compare_the_math_not_the_cuda_memory_figure(tmp_path, monkeypatch):
    """device="cpu" standing in for CUDA: LoggerHook logs ``train/memory`` as it does on CUDA,
    from a peak that only grows in this process. The straight and the resumed run stay equal on
    everything the proofs compare, and the memory figure is there but not compared."""
    log_on_cuda = LoggerHook.before_train

    def before_train(self, runner):
        log_on_cuda(self, runner)
        self._cuda_device = torch.device("cuda", 0)  # the memory figure of a CUDA run

    peak = itertools.count(100)
    monkeypatch.setattr(LoggerHook, "before_train", before_train)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: float(next(peak)))
    straight = rh.contract_config(tmp_path / "straight", max_iters=N, device="cpu",
                                  checkpoint=dict(interval=K))
    resumed = dict(straight, work_dir=str(tmp_path / "resumed"))
    rh.train(straight)
    rh.train_interrupted(resumed, at=K)
    rh.train_resumed(resumed)
    assert all("train/memory" in row for row in rh.read_scalars(tmp_path / "resumed"))
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", N)


def test_deterministic_turns_on_what_exactness_needs_on_cuda(monkeypatch, determinism_put_back):
    """device="cpu", CUDA's availability monkeypatched: the settings are the process's, set by
    seed_everything before the model is built (so before the first cuBLAS call of a run)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = False, True
    env.seed_everything(dict(seed=0, deterministic=True), rank=0)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()  # an op without one raises
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark


def test_a_workspace_setting_of_the_users_own_is_kept(monkeypatch, determinism_put_back):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # the other deterministic setting
    env.seed_everything(dict(seed=0, deterministic=True), rank=0)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"


@pytest.mark.gpu
def test_a_deterministic_run_on_cuda_is_deterministic_and_saves_the_cuda_rng(
        tmp_path, determinism_put_back):
    """device="cuda": the runner's run has the settings on, and its checkpoint holds the CUDA
    generator of every device, restored on resume."""
    cfg = rh.contract_config(tmp_path, max_iters=K, device="cuda", checkpoint=dict(interval=K))
    runner = rh.train(cfg)
    assert runner.device.type == "cuda"
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    rng = load_checkpoint(tmp_path / f"iter_{K}.pth")["rng"][0]
    assert len(rng["cuda"]) == torch.cuda.device_count()
    torch.cuda.manual_seed_all(12345)
    resumed = Runner.from_cfg(dict(cfg, resume=True))
    resumed.checkpointer.restore()
    for device, state in enumerate(rng["cuda"]):
        assert torch.equal(torch.cuda.get_rng_state(device), state.cpu())


def straight_and_resumed(tmp_path, device):
    """N steps straight, and stopped at K then resumed to N, on ``device``, deterministic=False."""
    kw = dict(max_iters=N, device=device, checkpoint=dict(interval=K),
              randomness=dict(seed=0, deterministic=False))
    straight = rh.train(rh.contract_config(tmp_path / "straight", **kw))
    cfg = rh.contract_config(tmp_path / "resumed", **kw)
    rh.train_interrupted(cfg, at=K)
    return straight, rh.train_resumed(cfg)


@pytest.mark.gpu
def test_resume_on_cuda_without_deterministic_is_within_float_tolerance(tmp_path,
                                                                        determinism_put_back):
    """device="cuda", deterministic=False: no bit-identity is promised (kernels that add with
    atomics may differ in the last bits), only the same run within float32 tolerance: rtol 1e-4,
    atol 1e-5 on the weights after N AdamW steps (the graph/eager tolerance of
    test_resume_graph.py)."""
    torch.use_deterministic_algorithms(False)  # an earlier run of this process may have set it
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = False, True
    straight, resumed = straight_and_resumed(tmp_path, "cuda")
    for key, value in straight.unwrapped_model.state_dict().items():
        torch.testing.assert_close(resumed.unwrapped_model.state_dict()[key], value,
                                   rtol=1e-4, atol=1e-5, msg=key)


def test_on_the_cpu_a_resume_is_bit_identical_without_deterministic(tmp_path,
                                                                   determinism_put_back):
    """device="cpu", deterministic=False (the default): the CPU's kernels add in a fixed order,
    so the resumed run is still bit-identical (docs/reliability.md)."""
    torch.use_deterministic_algorithms(False)  # an earlier run of this process may have set it
    straight, resumed = straight_and_resumed(tmp_path, "cpu")
    assert not torch.are_deterministic_algorithms_enabled()
    rh.assert_same_model(straight.unwrapped_model, resumed.unwrapped_model)
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", N)
