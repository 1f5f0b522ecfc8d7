"""No host sync in the training step: between two log lines, no iteration reads a value back
from the device (issue 37). device="cpu" counts the calls that would wait for a GPU there
(``Tensor.item``, ``float()``, ``bool()``, ``int()``, ``tolist``, ``cpu``, ``numpy``: every
device-to-host read) per iteration of a real run; the gpu-marked test runs the step under
``torch.cuda.set_sync_debug_mode("error")``.

The budget, precisely: with LoggerHook(interval=L), an iteration whose log line is not due reads
nothing (0 calls); the iterations that end an interval (L-1, 2L-1, ... 0-based) and ``after_train``
read the interval's values (the loss, grad_norm, loss_scale, the NaN verdicts). Not counted, host
tensors by design on every device: the step counter of a non-fused torch optimizer (torch reads
it with ``.item()`` on the host; a fused optimizer keeps it on the device and reads it not at
all) and the data loader's seeds (``torch/utils/data``, before the step).
"""

from __future__ import annotations

import collections
import sys

import pytest
import torch
from test_throughput_failures import LinearNet
from torch import nn

from libai.runner import Runner

_READS = ("item", "__float__", "__bool__", "__int__", "__index__", "tolist", "cpu", "numpy")
L, N = 4, 12
_DATA_LOADING = "torch/utils/data/"  # the loader's seeds: host tensors, before the step




def _cfg(tmp_path, device="cpu", optim=None, hooks=None):
    from libai.testing import ToyDataset

    optim_wrapper = dict(optimizer=dict(type="AdamW", lr=0.01), clip_grad=dict(max_norm=1.0))
    optim_wrapper.update(optim or {})
    default_hooks = dict(checkpoint=None, logger=dict(interval=L, progress_bar=False, plot=False,
                                                      backends=[]))
    default_hooks.update(hooks or {})
    return dict(
        model=LinearNet(), work_dir=str(tmp_path), device=device,
        train_dataloader=dict(dataset=ToyDataset(num_samples=96, in_features=5, num_classes=3),
                              batch_size=6, sampler=dict(type="DefaultSampler", shuffle=False)),
        train_cfg=dict(type="IterBasedTrainLoop", max_iters=N, val_interval=1000),
        optim_wrapper=optim_wrapper, default_hooks=default_hooks, randomness=dict(seed=0))


def reads_per_iteration(runner: Runner, monkeypatch) -> dict[int, int]:
    """Train ``runner`` with every device-to-host read counted by the iteration it happens in
    (``runner.iter``: N for after_train)."""
    counts: collections.Counter = collections.Counter()
    where: dict[int, list[str]] = collections.defaultdict(list)

    def counted(name):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            loop = runner._train_loop
            caller = sys._getframe(1)
            if (loop is not None and not _host_step_counter(runner, self)
                    and _DATA_LOADING not in caller.f_code.co_filename):
                counts[loop.iter] += 1
                where[loop.iter].append(f"{name} in {caller.f_code.co_filename}:"
                                        f"{caller.f_lineno}")
            return original(self, *args, **kwargs)
        return read

    for name in _READS:
        monkeypatch.setattr(torch.Tensor, name, counted(name))
    runner.train()
    monkeypatch.undo()
    between = {i: where[i] for i in range(N) if (i + 1) % L and counts[i]}
    assert not between, f"device reads between log lines: {between}"
    return dict(counts)


def _host_step_counter(runner: Runner, tensor: torch.Tensor) -> bool:
    optimizer = runner._optim_wrapper.optimizer if runner._optim_wrapper is not None else None
    return optimizer is not None and any(
        state.get("step") is tensor for state in optimizer.state.values())


CASES = {
    "float32, AdamW, norm clipping": {},
    "bfloat16": dict(optim=dict(type="AmpOptimWrapper", dtype="bfloat16")),
    "accumulation over 2": dict(optim=dict(accumulative_counts=2)),
    "SGD": dict(optim=dict(optimizer=dict(type="SGD", lr=0.1), clip_grad=None)),
    # the gradients checked before every step, the verdict handed to the fused kernel
    "policy='skip', fused AdamW": dict(
        optim=dict(optimizer=dict(type="AdamW", lr=0.01, fused=True)),
        hooks=dict(nonfinite=dict(type="NonFiniteLossHook", policy="skip"))),
}


@pytest.mark.parametrize("case", CASES)
def test_no_device_read_between_log_lines(tmp_path, monkeypatch, case):
    runner = Runner.from_cfg(_cfg(tmp_path, **CASES[case]))
    counts = reads_per_iteration(runner, monkeypatch)
    assert runner.iter == N
    assert any(counts.get(i) for i in range(L - 1, N, L))  # the lines do read (the check counts)


def test_float16_with_the_optimizer_chosen_for_cuda_reads_nothing_per_step(tmp_path, monkeypatch):
    """Parameters on CUDA get the fused AdamW (faked here: the choice reads ``device_types``);
    the GradScaler then hands it its inf check as a tensor instead of reading it every step
    (torch reads it with ``.item()`` for a non-fused optimizer)."""
    from libai.optim.amp_optim_wrapper import _float16_supported

    if not _float16_supported("cpu"):
        pytest.skip("this torch build has no float16 autocast on the CPU")
    import libai.optim.fused as fused_module

    monkeypatch.setattr(fused_module, "device_types", lambda params: {"cuda"})
    runner = Runner.from_cfg(_cfg(tmp_path, optim=dict(type="AmpOptimWrapper", dtype="float16")))
    assert runner.optim_wrapper.optimizer.defaults["fused"] is True
    reads_per_iteration(runner, monkeypatch)


@pytest.mark.gpu
def test_the_step_runs_under_sync_debug_mode_error(tmp_path, monkeypatch):
    """On CUDA: the batch's copy, forward, backward, the skip verdict, clipping, the fused
    AdamW step and zero_grad never wait for the GPU; the hooks' reads happen only at the lines
    (the counted test above, on CUDA tensors here)."""
    runner = Runner.from_cfg(_cfg(tmp_path, device="cuda", optim=dict(
        type="AmpOptimWrapper", dtype="bfloat16"), hooks=dict(
        nonfinite=dict(type="NonFiniteLossHook", policy="skip"))))
    step = runner.train_step_fn()

    def strict(data, optim_wrapper):
        torch.cuda.set_sync_debug_mode("error")
        try:
            return step(data, optim_wrapper)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(runner, "train_step_fn", lambda: strict)
    assert runner.optim_wrapper.optimizer.defaults["fused"] is True
    reads_per_iteration(runner, monkeypatch)
    assert runner.iter == N


def test_the_batch_goes_to_an_accelerator_without_waiting(monkeypatch):
    """A blocking host-to-device copy waits for the device's queue (torch's memcpy_and_sync: a
    sync per step under set_sync_debug_mode); the train step's copy is asynchronous, the stream
    orders it before the forward. device="cpu", the copy faked: ``Tensor.to`` records its
    arguments and returns the tensor."""
    from libai.model.steps import DataPreprocessor, make_train_step

    copies = []
    monkeypatch.setattr(torch.Tensor, "to", lambda t, *a, **k: copies.append(k) or t)

    class Wrapper:
        plain_forward, accumulative_counts = True, 1

        def update_params(self, loss):
            pass

    model = nn.Linear(2, 1)
    step = make_train_step(model, lambda batch: {"loss": batch["x"].sum()}, device="cuda")
    step({"x": torch.ones(2)}, Wrapper())
    assert copies == [{"non_blocking": True}]
    copies.clear()
    pre = DataPreprocessor()
    monkeypatch.setattr(pre, "_device_probe", torch.empty(0, device="meta"))  # "an accelerator"
    pre({"x": torch.ones(2)})
    assert copies == [{"non_blocking": True}]
    assert DataPreprocessor(non_blocking=False).non_blocking is False  # a user's choice stays
