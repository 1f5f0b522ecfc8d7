"""A fake runner with the attributes hooks may use (docs/design.md), and a loop that drives it.

The loop follows the real contract: during ``before_train_iter``/``after_train_iter`` of the i-th
iteration (0-based) ``runner.iter == i``; the counter moves after ``after_train_iter``; in an
epoch loop ``runner.epoch`` moves after ``after_train_epoch``.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from libai.hooks.hook import Hook, get_priority
from libai.model.execution import Execution
from libai.utils.dist import DataParallel
from libai.utils.message_hub import MessageHub


class ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


class FakeOptimWrapper:
    def __init__(self, model: nn.Module, lr: float = 1e-3) -> None:
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        self.grad_norm: float | None = 1.5
        self.scaler = None

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    def get_lr(self) -> dict[str, list[float]]:
        return {"lr": [g["lr"] for g in self.optimizer.param_groups]}

    def scalars(self) -> dict[str, float]:
        return {} if self.grad_norm is None else {"grad_norm": self.grad_norm}

    def should_update(self) -> bool:
        return True


class FakeLoop:
    def __init__(self, max_iters: int, max_epochs: int | None, iters_per_epoch: int | None) -> None:
        self.max_iters = max_iters
        self.max_epochs = max_epochs
        self.iters_per_epoch = iters_per_epoch


class FakeSampler:
    def __init__(self) -> None:
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


class FakeCheckpointer:
    """Like the runner's Checkpointer: hook states in, file + manifest written, latest pointer
    moved (unless ``latest`` is False); records what it saved on the runner."""

    def __init__(self, runner: FakeRunner) -> None:
        self.runner = runner
        self.work_dir, self.logger, self.rank = runner.work_dir, runner.logger, runner.rank
        self.series_dir = runner.log_dir  # a fresh run's series is in its own run folder

    @property
    def schedule(self) -> Any:
        from libai.hooks import CheckpointHook

        return next((h for h in self.runner.hooks if isinstance(h, CheckpointHook)), None)

    def wait(self) -> None:
        pass

    def best(self) -> dict | None:
        from libai.checkpoint.checkpointer import Checkpointer

        return Checkpointer.best(self)  # type: ignore[arg-type]

    def save(self, filename: str, meta: dict | None = None,
             asynchronous: bool = False, latest: bool = True) -> str:
        runner = self.runner
        path = os.path.join(self.work_dir, filename)
        state = {
            "iter": runner.iter,
            "hooks": {h.state_key: h.state_dict() for h in runner.hooks if h.is_stateful()},
        }
        runner.call_hook("before_save_checkpoint", checkpoint=state)
        torch.save(state, path)
        with open(path + ".manifest.json", "w") as f:
            f.write("{}")
        if latest:
            with open(os.path.join(self.work_dir, "latest_checkpoint"), "w") as f:
                f.write(filename + "\n")
        runner.saved.append(filename)
        runner.checkpoints[filename] = state
        return path


class FakeRunner:
    """Enough of a runner for hooks (libai.hooks.hook.RunnerView): state attributes, call_hook,
    the writer and a checkpointer."""

    def __init__(
        self,
        tmp_path: Any,
        hooks: list[Hook] | None = None,
        max_iters: int = 10,
        max_epochs: int | None = None,
        iters_per_epoch: int | None = None,
        model: nn.Module | None = None,
        rank: int = 0,
    ) -> None:
        self.cfg: dict = {}
        self.work_dir = str(tmp_path)
        self.log_dir = os.path.join(self.work_dir, "20240101_000000")
        os.makedirs(self.log_dir, exist_ok=True)
        self.log_handler = ListHandler()
        self.logger = logging.getLogger(f"test.{uuid.uuid4().hex}")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self.log_handler)
        self.message_hub = MessageHub()
        self.unwrapped_model = model if model is not None else nn.Linear(2, 1)
        self.model = self.unwrapped_model
        self.execution = Execution.eager(self.unwrapped_model)  # how it runs: as it is
        self.optim_wrapper = FakeOptimWrapper(self.unwrapped_model)
        self.param_schedulers: list = []
        self.sampler = FakeSampler()
        self.train_dataloader = type(
            "Loader", (), {"sampler": self.sampler, "batch_sampler": None}
        )()
        self.train_loop = FakeLoop(max_iters, max_epochs, iters_per_epoch)
        self.train_loop.dataloader = self.train_dataloader
        self.val_loop = self.test_loop = None
        self.iter = 0
        self.epoch = 0
        self.rank = rank
        self.world_size = 1
        self.device = torch.device("cpu")
        self.should_stop = False
        self.saved: list[str] = []
        self.checkpoints: dict[str, dict] = {}
        self.hooks = sorted(hooks or [], key=lambda h: get_priority(h.priority))
        self.experiment_name = "fake"
        self.timestamp = os.path.basename(self.log_dir)
        self.fast_dev_run = 0
        self.data_parallel = DataParallel()
        self.checkpointer = FakeCheckpointer(self)

    @property
    def series_dir(self) -> str:
        return self.checkpointer.series_dir

    @property
    def max_iters(self) -> int:
        return self.train_loop.max_iters

    @property
    def max_epochs(self) -> int | None:
        return self.train_loop.max_epochs

    def call_hook(self, stage: str, **kwargs: Any) -> None:
        for hook in self.hooks:
            getattr(hook, stage)(self, **kwargs)

    def limit_iters(self, max_iters: int) -> int:
        return max_iters

    @property
    def writer(self) -> Any:
        from libai.hooks import LoggerHook

        return next((h for h in self.hooks if isinstance(h, LoggerHook)), None)

    @property
    def messages(self) -> list[str]:
        return self.log_handler.messages


def run_iters(
    runner: FakeRunner,
    n: int | None = None,
    outputs: Callable[[int], dict] | None = None,
    validate: Callable[[int], dict | None] | None = None,
    step: bool = False,
) -> None:
    """Drive the hooks like IterBasedTrainLoop (or EpochBasedTrainLoop when max_epochs is set).

    Args:
        n: Iterations to run from runner.iter. Defaults to max_iters - iter.
        outputs: i -> logged values of iteration i. Defaults to {'loss': 1/(i+1)}.
        validate: completed iterations -> val metrics (or None: no validation then).
        step: Run a real SGD step on the fake model (loss = sum of its outputs).
    """
    outputs = outputs or (lambda i: {"loss": torch.tensor(1.0 / (i + 1))})
    stop = runner.iter + (n if n is not None else runner.max_iters - runner.iter)
    epoch_loop = runner.max_epochs is not None
    runner.call_hook("before_train")
    while runner.iter < stop and not runner.should_stop:
        runner.call_hook("before_train_epoch")
        per_epoch = runner.train_loop.iters_per_epoch if epoch_loop else stop
        batch = 0
        while batch < per_epoch and runner.iter < stop and not runner.should_stop:
            runner.call_hook("before_train_iter", batch_idx=batch, data_batch=None)
            if step:
                opt = runner.optim_wrapper.optimizer
                loss = runner.unwrapped_model(torch.ones(1, 2)).sum()
                loss.backward()
                runner.call_hook("after_backward")
                opt.step()
                opt.zero_grad()
            out = outputs(runner.iter)
            runner.call_hook("after_train_iter", batch_idx=batch, data_batch=None, outputs=out)
            runner.iter += 1
            batch += 1
            if validate is not None and not epoch_loop:
                _val(runner, validate)
        if epoch_loop and batch == per_epoch:
            runner.call_hook("after_train_epoch")
            runner.epoch += 1
            if validate is not None:
                _val(runner, validate)
        elif not epoch_loop:
            runner.call_hook("after_train_epoch")
    runner.call_hook("after_train")


def _val(runner: FakeRunner, validate: Callable[[int], dict | None]) -> None:
    metrics = validate(runner.iter)
    if metrics is None:
        return
    run_val(runner, metrics)


def run_val(runner: FakeRunner, metrics: dict, stage: str = "val", n_batches: int = 2) -> None:
    runner.call_hook(f"before_{stage}")
    runner.call_hook(f"before_{stage}_epoch")
    for i in range(n_batches):
        runner.call_hook(f"before_{stage}_iter", batch_idx=i, data_batch=None)
        runner.call_hook(f"after_{stage}_iter", batch_idx=i, data_batch=None, outputs={})
    runner.call_hook(f"after_{stage}_epoch", metrics=metrics)
    runner.call_hook(f"after_{stage}", metrics=metrics)


@pytest.fixture
def make_runner(tmp_path: Any) -> Callable[..., FakeRunner]:
    def make(*hooks: Hook, **kwargs: Any) -> FakeRunner:
        return FakeRunner(tmp_path, list(hooks), **kwargs)

    return make


@pytest.fixture(name="run_iters")
def _run_iters_fixture() -> Callable[..., None]:
    return run_iters


@pytest.fixture(name="run_val")
def _run_val_fixture() -> Callable[..., None]:
    return run_val
