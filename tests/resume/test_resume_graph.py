"""Graph mode (GraphOptimWrapper) and resume: bit-identical within graph mode on the CPU, and a
checkpoint saved in one mode resumes in the other (same keys; results within float tolerance).

The run is resume_helpers' contract run: dropout, AdamW with clipping and accumulation 2,
warm-up + cosine, interrupted inside an accumulation window. Compiled with aot_eager: what resume
keeps is the same whichever backend compiles (tests/optim/test_graph_mode.py compiles with
inductor).
"""

import copy
import logging
import shutil

import pytest
import resume_helpers as rh
import torch

from libai.checkpoint import load_checkpoint

N, K = 12, 7


def config(work_dir, graph):
    cfg = rh.contract_config(work_dir, acc=2, max_iters=N)
    if graph:
        cfg["optim_wrapper"] = dict(cfg["optim_wrapper"], type="GraphOptimWrapper",
                                    compile=dict(backend="aot_eager"))
    return cfg


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def check_saved_as_eager_saves(saved_dir, eager_dir):
    """A checkpoint of either mode holds what eager mode saves: the same keys (no _orig_mod.
    prefixes), plain float learning rates (not graph mode's lr tensors)."""
    saved = load_checkpoint(saved_dir / "iter_4.pth")
    reference = load_checkpoint(eager_dir / "iter_4.pth")
    assert set(saved["state_dict"]) == set(reference["state_dict"])
    assert saved["optimizer"].keys() == reference["optimizer"].keys()
    groups = saved["optimizer"]["optimizer"]["param_groups"]
    assert all(type(g["lr"]) is float for g in groups)


def assert_close_to(eager, runner):
    """The weights of ``runner`` equal those of the eager run within float tolerance."""
    assert runner.iter == N
    for key, value in eager.unwrapped_model.state_dict().items():
        torch.testing.assert_close(runner.unwrapped_model.state_dict()[key], value,
                                   rtol=1e-4, atol=1e-5, msg=key)


def test_graph_mode_resume_is_bit_identical_and_resumes_in_eager_mode(tmp_path):
    """One graph run stopped at K resumes in graph mode (bit-identical to the straight graph
    run) and, from a copy of its work dir, in eager mode (the eager run within tolerance)."""
    straight = rh.train(config(tmp_path / "straight", graph=True))
    assert type(straight.optim_wrapper).__name__ == "GraphOptimWrapper" and not straight.model.eager
    rh.train_interrupted(config(tmp_path / "resumed", graph=True), at=K)
    shutil.copytree(tmp_path / "resumed", tmp_path / "mixed")
    resumed = rh.train_resumed(config(tmp_path / "resumed", graph=True))
    assert not resumed.model.eager
    rh.assert_same_model(straight.unwrapped_model, resumed.unwrapped_model)
    rh.assert_same_final_checkpoint(tmp_path / "straight", tmp_path / "resumed", f"iter_{N}.pth")
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", N)

    eager = rh.train(config(tmp_path / "eager", graph=False))
    check_saved_as_eager_saves(tmp_path / "mixed", tmp_path / "eager")
    assert_close_to(eager, rh.train_resumed(config(tmp_path / "mixed", graph=False)))


def test_an_eager_checkpoint_resumes_in_graph_mode(tmp_path):
    eager = rh.train(config(tmp_path / "eager", graph=False))
    rh.train_interrupted(config(tmp_path / "mixed", graph=False), at=K)
    check_saved_as_eager_saves(tmp_path / "mixed", tmp_path / "eager")
    assert_close_to(eager, rh.train_resumed(config(tmp_path / "mixed", graph=True)))


def test_graph_options_pass_through_the_config_and_evaluation_is_compiled(tmp_path):
    """One compiled run holds both claims: paramwise groups each get their own lr tensor and
    verify_steps checks that many steps; the evaluation step runs compiled without making
    training recompile."""
    cfg = copy.deepcopy(config(tmp_path, graph=True))
    cfg["optim_wrapper"].update(paramwise_cfg=dict(bias_lr_mult=2.0), verify_steps=2)
    cfg["train_cfg"] = dict(type="IterBasedTrainLoop", max_iters=N, val_interval=4)
    cfg["val_dataloader"] = dict(cfg["train_dataloader"],
                                 sampler=dict(type="DefaultSampler", shuffle=False))
    cfg["val_evaluator"] = dict(type="Accuracy")
    cfg["val_cfg"] = dict(type="ValLoop")
    cfg["log_level"] = "INFO"
    records = rh.LogRecords()
    logging.getLogger("libai").addHandler(records)
    try:
        runner = rh.train(cfg)
    finally:
        logging.getLogger("libai").removeHandler(records)
    assert "eval" in runner.model.compile_seconds  # the evaluation step ran compiled
    assert runner.model.training_recompiles == 0  # and training kept its graph
    groups = runner.optim_wrapper.param_groups
    assert len(groups) == 2 and all(isinstance(g["lr"], torch.Tensor) for g in groups)
    assert groups[1]["initial_lr"] == pytest.approx(2 * groups[0]["initial_lr"])
    checks = [m for m in records.messages if m.startswith("Graph mode parity check")]
    assert [m.split(":")[0] for m in checks] == ["Graph mode parity check, step 1",
                                                 "Graph mode parity check, step 2"]
