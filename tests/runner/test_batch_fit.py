"""The micro-batch that fits the device (micro_batch=..., batch_size='auto'): chosen from the GPU's
memory (faked here: torch.cuda.is_available / get_device_properties patched), the global batch
kept by the accumulation, an explicit batch_size winning, one log line. All on the CPU."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from libai.config import Config
from libai.runner import Runner
from libai.testing import toy_config
from libai.utils.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CUDA = torch.device("cuda", 0)
GiB = 2**30


@pytest.fixture
def batch_fit():
    import libai.runner.batch_fit as module  # imported per test: each fails alone on old code

    return module


@pytest.fixture
def gpu_memory(monkeypatch):
    """``gpu_memory(gib)``: torch reports one CUDA device of that many GiB."""
    def fake(gib):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda device=None: SimpleNamespace(total_memory=int(gib * GiB)))
    return fake


def shipped(name, *options):
    cfg = Config.fromfile(str(ROOT / "configs" / f"{name}.py"))
    cfg.merge_from_options(list(options))
    return cfg


@pytest.mark.parametrize("gib, micro", [(15.8, 8), (23.99, 16), (39.4, 32), (79.6, 64),
                                        (140.4, 64), (8, 8)])
def test_bert_large_takes_the_micro_batch_of_its_table_and_keeps_256(batch_fit, gpu_memory, gib, micro):
    gpu_memory(gib)  # V100 16 GB, RTX 4090, A100 40 GB, H100 80 GB, H200, below the table
    fit = batch_fit.resolve(shipped("bert_large"), CUDA, processes=1)
    assert (fit.micro, fit.accumulation, fit.global_batch) == (micro, 256 // micro, 256)
    assert f" {gib:.0f} GB GPU" in fit.summary()


def test_the_log_line_says_what_and_why(batch_fit, gpu_memory):
    gpu_memory(140.4)
    assert batch_fit.resolve(shipped("bert_large"), CUDA, 1).summary() == (
        "Micro-batch 64 (a 140 GB GPU: the table in configs/bert_large.py), accumulating 4 for "
        "a global batch of 256")
    fit = batch_fit.resolve(shipped("bert_large"), CUDA, 2)  # two data-parallel processes
    assert (fit.micro, fit.accumulation, fit.global_batch) == (64, 2, 256)
    assert "accumulating 2 over 2 processes for a global batch of 256" in fit.summary()


def test_the_cpu_keeps_todays_shapes(batch_fit):
    for name, micro, accumulation in (("bert_large", 2, 128), ("llama3_1b", 1, 64)):
        fit = batch_fit.resolve(shipped(name), torch.device("cpu"), 1)
        assert (fit.micro, fit.accumulation) == (micro, accumulation), name
        assert f"no GPU: micro_batch.cpu in configs/{name}.py" in fit.summary()


def test_llama3_1b_table(batch_fit, gpu_memory):
    for gib, micro in ((39.4, 1), (79.6, 4), (140.4, 8)):
        gpu_memory(gib)
        fit = batch_fit.resolve(shipped("llama3_1b"), CUDA, 1)
        assert (fit.micro, fit.global_batch) == (micro, 64)


def test_an_explicit_batch_size_wins_and_the_global_batch_is_kept_or_said(batch_fit, gpu_memory):
    gpu_memory(140.4)
    fit = batch_fit.resolve(shipped("bert_large", "train_dataloader.batch_size=16"), CUDA, 1)
    assert (fit.micro, fit.accumulation, fit.global_batch) == (16, 16, 256)
    assert fit.summary().startswith("Micro-batch 16 (train_dataloader.batch_size, given)")
    odd = batch_fit.resolve(shipped("bert_large", "train_dataloader.batch_size=24"), CUDA, 1)
    assert (odd.micro, odd.accumulation, odd.global_batch) == (24, 10, 240)
    assert "global batch of 240 (micro_batch.global_batch=256 is not reachable" in odd.summary()
    both = batch_fit.resolve(shipped("bert_large", "train_dataloader.batch_size=2",
                                     "optim_wrapper.accumulative_counts=1"), CUDA, 1)
    assert (both.micro, both.accumulation, both.global_batch) == (2, 1, 2)
    assert "accumulating 1 (optim_wrapper.accumulative_counts, given)" in both.summary()


def test_the_runner_trains_with_the_choice_and_logs_it(tmp_path, monkeypatch, libai_log):
    # the runner's device stays the CPU; the memory the resolver reads is a GPU's
    monkeypatch.setattr("libai.runner.batch_fit.device_memory_gb", lambda device: 80.0)
    cfg = toy_config(work_dir=str(tmp_path), train_cfg=dict(max_iters=4, val_interval=100),
                     train_dataloader=dict(batch_size="auto"),
                     default_hooks=dict(logger=dict(interval=2, progress_bar=False, plot=False),
                                        checkpoint=None))
    cfg["micro_batch"] = dict(global_batch=16, table=[(16, 2), (40, 4)], cpu=1)
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.train_dataloader.batch_size == 4
    assert runner.optim_wrapper.accumulative_counts == 4
    assert ("Micro-batch 4 (an 80 GB GPU: the table in the config), accumulating 4 for a global "
            "batch of 16") in libai_log
    assert any("effective batch size 4 x 1 process(es) x 4 accumulation = 16" in m
               for m in libai_log), libai_log
    assert runner.cfg.train_dataloader.batch_size == "auto"  # never written back


def test_on_the_cpu_the_runner_takes_the_cpu_row(tmp_path, libai_log):
    cfg = toy_config(work_dir=str(tmp_path), train_cfg=dict(max_iters=2, val_interval=100),
                     train_dataloader=dict(batch_size="auto"),
                     default_hooks=dict(logger=dict(interval=1, progress_bar=False, plot=False),
                                        checkpoint=None))
    cfg["micro_batch"] = dict(global_batch=16, table=[(16, 8)], cpu=4)
    runner = Runner.from_cfg(cfg)
    runner.train()
    assert runner.train_dataloader.batch_size == 4 and runner.optim_wrapper.accumulative_counts == 4
    assert ("Micro-batch 4 (no GPU: micro_batch.cpu in the config), accumulating 4 for a global "
            "batch of 16") in libai_log


def test_auto_without_a_table_and_a_bad_table_are_refused(tmp_path):
    cfg = toy_config(work_dir=str(tmp_path), train_dataloader=dict(batch_size="auto"))
    with pytest.raises(ConfigError, match="needs a micro_batch key to choose from"):
        Runner.from_cfg(cfg)
    cfg = toy_config(work_dir=str(tmp_path))
    cfg["micro_batch"] = dict(global_batch=16, table=[(16, 0)])
    with pytest.raises(ConfigError, match=r"micro_batch.table must be a list of \(GB"):
        Runner.from_cfg(cfg)
    cfg["micro_batch"] = dict(global_batch=16, tabel=[])
    with pytest.raises(ConfigError, match="Unknown key 'micro_batch.tabel'"):
        Runner.from_cfg(cfg)


def test_a_resume_on_a_gpu_that_chooses_otherwise_is_refused(tmp_path, monkeypatch):
    def run(gib, iters, **extra):
        monkeypatch.setattr("libai.runner.batch_fit.device_memory_gb", lambda device: gib)
        cfg = toy_config(work_dir=str(tmp_path), train_cfg=dict(max_iters=iters, val_interval=100),
                         train_dataloader=dict(batch_size="auto"), val_dataloader=None,
                         val_cfg=None, val_evaluator=None,
                         default_hooks=dict(logger=dict(interval=2, progress_bar=False,
                                                        plot=False),
                                            checkpoint=dict(interval=2)), **extra)
        cfg["micro_batch"] = dict(global_batch=16, table=[(16, 2), (40, 4)], cpu=1)
        Runner.from_cfg(cfg).train()

    run(80.0, 4)  # micro-batch 4 x 4
    run(80.0, 4, resume=True)  # the same GPU: the same choice, resumed
    with pytest.raises(ConfigError, match=r"train_dataloader.batch_size.chosen: 4 in the "
                                          r"checkpoint, 2 now"):
        run(20.0, 4, resume=True)  # micro-batch 2 x 8
