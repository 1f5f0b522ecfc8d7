"""Resume works for every kind of optimizer under every layout: SGD without momentum (no state at
all), SGD with momentum, AdamW (on GPT-2 with layer decay: a group per block's learning rate, so
the pipeline stages have groups of their own), Adagrad (state made when it is built) and a custom
optimizer that keeps nothing. A run resumed from the straight run's checkpoint at K ends
bit-identical to the straight run at N.

One process runs in-process (Runner API, CPU). DDP, FSDP2, tensor parallel and a 2-stage pipeline
run in one launch of 2 forked ranks on CPU (spawn_ranks, gloo), one run after another. A pipeline
checkpoint of a stateless SGD once failed on resume: DCP keeps one rank's copy of the parameter
group lists, which under a pipeline name another stage's parameters.
"""

import pytest
import resume_helpers as rh
import torch
from test_resume_ddp import CONFIG as DIGITS
from test_resume_fsdp import shards
from test_resume_pipeline import CONFIG as GPT2

from libai.registry import OPTIMIZERS

N, K = 6, 3


@OPTIMIZERS.register_module()
class SignDescentForTests(torch.optim.Optimizer):
    """Steps by the sign of the gradient and keeps no state: a user's stateless optimizer."""

    def __init__(self, params, lr: float = 1e-3) -> None:
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad.sign(), alpha=-group["lr"])


OPTIMS = {
    "sgd": dict(type="SGD", lr=0.05),
    "sgd_momentum": dict(type="SGD", lr=0.05, momentum=0.9),
    "adamw": dict(type="AdamW", lr=1e-3, weight_decay=0.1),
    "adagrad": dict(type="Adagrad", lr=0.05),
    "stateless": dict(type="SignDescentForTests", lr=1e-3),
}


def with_optimizer(text, name, layered):
    """``text`` with optimizer ``name``; AdamW of a transformer with layer decay, whose groups
    (one per block's learning rate) differ between pipeline stages."""
    wrapper = dict(optimizer=dict(_delete_=True, **OPTIMS[name]))
    if name == "adamw" and layered:
        wrapper["paramwise_cfg"] = dict(layer_decay_rate=0.5)
    return text + f"\noptim_wrapper = {wrapper!r}\n"


@pytest.mark.parametrize("name", OPTIMS)
def test_one_process_resume_is_bit_identical(tmp_path, name):
    cfg = rh.contract_config(tmp_path / "straight", max_iters=N, checkpoint=dict(interval=K))
    cfg["optim_wrapper"]["optimizer"] = dict(OPTIMS[name])
    cfg["param_scheduler"] = [dict(type="LinearLR", start_factor=0.1, begin=0, end=2),
                              dict(type="CosineAnnealingLR", begin=2, eta_min=1e-4)]
    rh.train(cfg)
    resumed = dict(cfg, work_dir=str(tmp_path / "resumed"))
    rh.train(dict(resumed, resume=str(tmp_path / "straight" / f"iter_{K}.pth")))
    rh.assert_same_final_checkpoint(tmp_path / "straight", tmp_path / "resumed", f"iter_{N}.pth")


LAYOUTS = {  # layout: (config template, its fill)
    "ddp": (DIGITS, dict(acc=2)),
    "fsdp": (DIGITS + "\nparallel = dict(fsdp=2)\n", dict(acc=2)),
    "tp": (GPT2, dict(root=rh.ROOT, parallel="tensor=2", dropout=0.0, layers=2)),
    "pipeline": (GPT2, dict(root=rh.ROOT, parallel="pipeline=2", dropout=0.0, layers=2)),
}


def test_every_layout_resumes_every_optimizer_bit_identically(tmp_path, spawn_ranks, run_tool):
    runs, cases = [], []
    for layout, (template, fill) in LAYOUTS.items():
        for name in OPTIMS:
            config = tmp_path / f"{layout}-{name}.py"
            config.write_text(with_optimizer(template.format(n=N, k=K, hooks=[], **fill), name,
                                             layered=template is GPT2))
            straight, resumed = tmp_path / f"{layout}-{name}", tmp_path / f"{layout}-{name}-r"
            runs += [[config, "--work-dir", straight],
                     [config, "--work-dir", resumed, "--resume", straight / f"iter_{K}.pth"]]
            cases.append((layout, name, straight, resumed))
    done = rh.runs_in_turn(spawn_ranks, 2, *runs)
    for (layout, name, straight, resumed), first, second in zip(cases, done[::2], done[1::2]):
        assert first.returncode == 0, (layout, name, first.output[-3000:])
        assert second.returncode == 0, (layout, name, second.output[-3000:])
        if layout == "ddp":
            rh.assert_same_final_checkpoint(straight, resumed, f"iter_{N}.pth")
        else:
            rh.assert_same_tensors(shards(straight / f"iter_{N}.pth", tmp_path),
                                   shards(resumed / f"iter_{N}.pth", tmp_path),
                                   f"{layout}/{name}")

    # one process resumes the pipeline's stateless-SGD checkpoint: DCP reshards it
    stop = tmp_path / "pipeline-sgd" / f"iter_{K}.pth"
    alone = run_tool("tools/train.py", tmp_path / "pipeline-sgd.py", "--work-dir",
                     tmp_path / "alone", "--resume", stop, "--allow-changes", "world_size",
                     "--cfg-options", "parallel.pipeline=1")
    assert alone.returncode == 0, alone.output[-3000:]
    assert "resharded on load" in alone.stdout
