"""Shared parts of the resume proofs: a dataset with random augmentation that records what it
loads, a hook that interrupts training like Ctrl-C, configs, and bit-exact comparisons.

The proofs all follow one pattern: train N iterations straight in one work dir; in another, train
to k, interrupt, resume to N; then the final state and every logged step must be identical.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from libai.checkpoint import load_checkpoint
from libai.hooks import Hook
from libai.registry import DATASETS, HOOKS
from libai.runner import Runner

ROOT = Path(__file__).resolve().parents[2]
TRAIN_TOOL = str(ROOT / "tools" / "train.py")

# Dataset indices loaded in this process, in order (num_workers=0 only).
LOADED: list[int] = []

BATCH = 4
SAMPLES = 44  # 11 iterations per epoch at BATCH
ITERS_PER_EPOCH = SAMPLES // BATCH


@DATASETS.register_module()
class NoisyBlobsDataset(Dataset):
    """Gaussian blobs (fixed) plus fresh noise drawn from the global torch RNG at every load: a
    random augmentation whose result depends on the RNG state at load time. Every load of an index
    is appended to :data:`LOADED`."""

    def __init__(
        self,
        num_samples: int = SAMPLES,
        in_features: int = 16,
        num_classes: int = 4,
        noise: float = 0.3,
    ) -> None:
        g = torch.Generator().manual_seed(7)
        centres = torch.randn(num_classes, in_features, generator=g) * 2.0  # (C, F)
        self.labels = torch.arange(num_samples) % num_classes  # (N,)
        self.inputs = centres[self.labels] + torch.randn(num_samples, in_features, generator=g)
        self.noise = noise

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        LOADED.append(int(index))
        x = self.inputs[index] + torch.randn(self.inputs.shape[1]) * self.noise
        return {"inputs": x, "labels": self.labels[index].clone()}


@HOOKS.register_module()
class InterruptAtHook(Hook):
    """Raise KeyboardInterrupt (as Ctrl-C would) once iteration ``at`` is complete, or send this
    process the signal ``signame`` (SIGTERM: a cluster's preemption) at that point.

    Priority LOWEST: at the same stage the CheckpointHook (VERY_LOW) has already saved.

    Args:
        at: The number of completed iterations after which to interrupt.
        stage: 'iter' interrupts in ``after_train_iter`` of iteration ``at``; 'epoch' in the
            ``after_train_epoch`` that ends at iteration ``at`` (after an epoch checkpoint).
        signame: A signal to send instead of raising KeyboardInterrupt. Defaults to None.
    """

    priority = "LOWEST"

    def __init__(self, at: int, stage: str = "iter", signame: str | None = None) -> None:
        self.at = at
        self.stage = stage
        self.signame = signame

    def _interrupt(self) -> None:
        if self.signame is None:
            raise KeyboardInterrupt
        os.kill(os.getpid(), getattr(signal, self.signame))

    def after_train_iter(
        self, runner: Any, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        if self.stage == "iter" and runner.iter + 1 == self.at:
            self._interrupt()

    def after_train_epoch(self, runner: Any) -> None:
        if self.stage == "epoch" and runner.iter == self.at:
            self._interrupt()


def quiet_logger(interval: int = 1) -> dict:
    return dict(
        interval=interval, progress_bar=False, plot=False, backends=[dict(type="JsonlBackend")]
    )


def contract_config(
    work_dir: Any,
    loop: str = "IterBasedTrainLoop",
    acc: int = 1,
    max_iters: int = 32,
    max_epochs: int = 3,
    checkpoint: dict | None = None,
    **overrides: Any,
) -> dict:
    """A run whose every part carries state across a resume: shuffled data with random noise,
    dropout, AdamW with clipping and accumulation, warmup + cosine, every step logged."""
    if loop == "IterBasedTrainLoop":
        train_cfg = dict(type=loop, max_iters=max_iters, val_interval=1000)
    else:
        train_cfg = dict(type=loop, max_epochs=max_epochs, val_interval=1000)
    cfg = dict(
        model=dict(type="DigitsMLP", in_features=16, hidden=32, num_classes=4, dropout=0.1),
        work_dir=str(work_dir),
        train_dataloader=dict(
            dataset=dict(type="NoisyBlobsDataset"),
            sampler=dict(type="DefaultSampler", shuffle=True),
            batch_size=BATCH,
            num_workers=0,
        ),
        train_cfg=train_cfg,
        optim_wrapper=dict(
            type="OptimWrapper",
            optimizer=dict(type="AdamW", lr=0.01, weight_decay=0.01),
            accumulative_counts=acc,
            clip_grad=dict(type="norm", max_norm=1.0),
        ),
        param_scheduler=[
            dict(type="LinearLR", start_factor=0.1, begin=0, end=6),
            dict(type="CosineAnnealingLR", begin=6, eta_min=1e-4),
        ],
        default_hooks=dict(logger=quiet_logger(), checkpoint=checkpoint or dict(interval=4)),
        # what exactness needs on CUDA (on the CPU it changes nothing): docs/reliability.md
        randomness=dict(seed=0, deterministic=True),
        log_level="WARNING",
    )
    cfg.update(overrides)
    return cfg


def train(cfg: dict) -> Runner:
    """Train a fresh runner built from a copy of ``cfg``; returns the runner."""
    runner = Runner.from_cfg(copy.deepcopy(cfg))
    runner.train()
    return runner


def train_interrupted(cfg: dict, at: int, stage: str = "iter") -> Runner:
    """Train ``cfg`` plus an :class:`InterruptAtHook` until it interrupts at ``at``."""
    cfg = copy.deepcopy(cfg)
    cfg["custom_hooks"] = list(cfg.get("custom_hooks") or []) + [
        dict(type="InterruptAtHook", at=at, stage=stage)
    ]
    runner = Runner.from_cfg(cfg)
    with pytest.raises(KeyboardInterrupt):
        runner.train()
    return runner


def train_resumed(cfg: dict, **extra: Any) -> Runner:
    """Train ``cfg`` with ``resume=True`` (the latest complete checkpoint of its work dir)."""
    return train(dict(cfg, resume=True, **extra))


def read_scalars(work_dir: Any) -> list[dict]:
    """The rows of the newest training series of ``work_dir`` (in its run folder)."""
    from libai.utils.run_layout import training_scalars

    path = training_scalars(str(work_dir))
    assert path is not None, f"no training scalars in {work_dir}"
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# Measurements of the machine, not the run's math: wall-clock values, ThroughputHook's rates
# derived from them, and on CUDA the peak memory (torch.cuda.max_memory_allocated: the process's
# peak so far, so a run that resumes in a process where another trained logs a higher figure).
MEASURED = ("train/time", "train/data_time", "train/samples_per_s", "train/tokens_per_s",
            "train/tflops", "train/mfu", "train/memory")
# and grad_norm, which test_logged_grad_norm_survives_resume checks on its own
NOT_COMPARED = (*MEASURED, "train/grad_norm")


def train_rows(work_dir: Any, skip: tuple[str, ...] = NOT_COMPARED) -> list[dict]:
    """The training rows of scalars.jsonl without the keys in ``skip``."""
    rows = []
    for row in read_scalars(work_dir):
        if "train/loss" in row:
            rows.append({k: v for k, v in row.items() if k not in skip})
    return rows


def assert_steps_are_one_series(work_dir: Any, last: int) -> None:
    """scalars.jsonl holds each step 1..last once, in increasing order."""
    steps = [row["step"] for row in read_scalars(work_dir)]
    assert all(a < b for a, b in zip(steps, steps[1:])), f"steps repeat or go backwards: {steps}"
    assert steps == list(range(1, last + 1)), steps


def assert_same_logs(
    straight_dir: Any, resumed_dir: Any, last: int, skip: tuple[str, ...] = NOT_COMPARED
) -> None:
    """Every logged training value (loss, accuracy, lr ...) of every step is bit-identical in
    both work dirs."""
    assert_steps_are_one_series(straight_dir, last)
    assert_steps_are_one_series(resumed_dir, last)
    expected, got = train_rows(straight_dir, skip), train_rows(resumed_dir, skip)
    for want, have in zip(expected, got):
        assert have == want, f"step {want['step']}: straight {want} vs resumed {have}"
    assert len(got) == len(expected)


def assert_same_tensors(expected: Any, got: Any, where: str = "") -> None:
    """Recursive equality of nested state; tensors with torch.equal (bit-identical)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor), where
        assert expected.dtype == got.dtype and torch.equal(expected, got), f"{where} differs"
    elif isinstance(expected, dict):
        assert set(expected) == set(got), f"{where}: keys {sorted(expected)} vs {sorted(got)}"
        for key in expected:
            assert_same_tensors(expected[key], got[key], f"{where}.{key}")
    elif isinstance(expected, list | tuple):
        assert len(expected) == len(got), where
        for i, (a, b) in enumerate(zip(expected, got)):
            assert_same_tensors(a, b, f"{where}[{i}]")
    else:
        assert expected == got, f"{where}: {expected!r} vs {got!r}"


def assert_same_model(expected: torch.nn.Module, got: torch.nn.Module) -> None:
    assert_same_tensors(expected.state_dict(), got.state_dict(), "state_dict")


def assert_same_final_checkpoint(straight_dir: Any, resumed_dir: Any, name: str) -> None:
    """The last checkpoints of both runs hold identical weights and optimizer state."""
    a = load_checkpoint(os.path.join(str(straight_dir), name))
    b = load_checkpoint(os.path.join(str(resumed_dir), name))
    assert_same_tensors(a["state_dict"], b["state_dict"], "state_dict")
    assert_same_tensors(a["optimizer"], b["optimizer"], "optimizer")
    assert a["loop"] == b["loop"]


def pythonpath(folder: Any) -> dict[str, str]:
    """``env`` for a real process that imports modules written to ``folder`` (hooks a config
    names): ``folder`` in front of the PYTHONPATH already set (a planted copy's, say)."""
    paths = (str(folder), os.environ.get("PYTHONPATH"))
    return {"PYTHONPATH": os.pathsep.join(p for p in paths if p)}


# ------------------------------------------------------------------------------ runs in turn
RUN_MARK = "--- resume_helpers: run "


@dataclass
class Run:
    """One run of :func:`train_in_turn`: its exit status (the first nonzero of the ranks, as
    torchrun reports) and what the ranks printed during it."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def train_in_turn(*argvs: list[str]) -> list[int]:
    """In a rank of ``spawn_ranks``: ``tools/train.py ARGV`` for each argv in turn, through its
    ``main`` and ``run_cli`` (the exit status, Ctrl-C's line), in one process group.

    A straight run, a stopped one and its resume then cost one launch, not three; the group is
    left once, at the end (what tools/train.py does after each run).
    """
    from libai.cli.train import main
    from libai.utils.cli import run_cli
    from libai.utils.dist import destroy_dist

    statuses = []
    for i, argv in enumerate(argvs):
        argv = [str(a) for a in argv]
        for stream in (sys.stdout, sys.stderr):
            print(f"{RUN_MARK}{i}", file=stream, flush=True)
        sys.argv = [TRAIN_TOOL, *argv]  # the stop line names the command that continues
        try:
            run_cli(main, argv)
        except SystemExit as e:
            statuses.append(e.code if isinstance(e.code, int) else 1)
        sys.stdout.flush()
        sys.stderr.flush()
    destroy_dist(0)
    return statuses


def runs_in_turn(spawn_ranks: Any, nproc: int, *argvs: list[Any]) -> list[Run]:
    """``nproc`` ranks forked by ``spawn_ranks`` run :func:`train_in_turn`; one :class:`Run`
    per argv."""
    ranks = spawn_ranks(nproc, train_in_turn, *argvs, timeout=300).check()
    runs = []
    for i in range(len(argvs)):
        statuses = [rank.value[i] for rank in ranks.ranks]
        runs.append(Run(next((s for s in statuses if s), 0),
                        "".join(_part(rank.stdout, i) for rank in ranks.ranks),
                        "".join(_part(rank.stderr, i) for rank in ranks.ranks)))
    return runs


def _part(text: str, i: int) -> str:
    """What a rank printed during run ``i`` of :func:`train_in_turn`."""
    after = text.split(f"{RUN_MARK}{i}\n", 1)[1]
    return after.split(f"{RUN_MARK}{i + 1}\n", 1)[0]


class LogRecords(logging.Handler):
    """Collects the messages logged to it (attach to the 'libai' logger)."""

    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())
