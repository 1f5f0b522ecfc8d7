"""Graph mode (GraphOptimWrapper) and resume: bit-identical within graph mode on the CPU, and a
checkpoint saved in one mode resumes in the other (same keys; results within float tolerance).

The run is resume_helpers' contract run: dropout, AdamW with clipping and accumulation 2,
warm-up + cosine, interrupted inside an accumulation window.
"""

import copy

import pytest
import resume_helpers as rh
import torch

from libai.checkpoint import load_checkpoint

N, K = 12, 7


def config(work_dir, graph):
    cfg = rh.contract_config(work_dir, acc=2, max_iters=N)
    if graph:
        cfg["optim_wrapper"] = dict(cfg["optim_wrapper"], type="GraphOptimWrapper")
    return cfg


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_graph_mode_resume_is_bit_identical(tmp_path):
    straight = rh.train(config(tmp_path / "straight", graph=True))
    assert type(straight.optim_wrapper).__name__ == "GraphOptimWrapper" and not straight.model.eager
    rh.train_interrupted(config(tmp_path / "resumed", graph=True), at=K)
    resumed = rh.train_resumed(config(tmp_path / "resumed", graph=True))
    assert not resumed.model.eager
    rh.assert_same_model(straight.unwrapped_model, resumed.unwrapped_model)
    rh.assert_same_final_checkpoint(tmp_path / "straight", tmp_path / "resumed", f"iter_{N}.pth")
    rh.assert_same_logs(tmp_path / "straight", tmp_path / "resumed", N)


@pytest.mark.parametrize("first,then", [(False, True), (True, False)], ids=["eager-then-graph", "graph-then-eager"])
def test_a_checkpoint_resumes_in_the_other_mode(tmp_path, first, then):
    eager = rh.train(config(tmp_path / "eager", graph=False))
    rh.train_interrupted(config(tmp_path / "mixed", graph=first), at=K)
    saved = load_checkpoint(tmp_path / "mixed" / "iter_4.pth")
    reference = load_checkpoint(tmp_path / "eager" / "iter_4.pth")
    assert set(saved["state_dict"]) == set(reference["state_dict"])  # no _orig_mod. prefixes
    assert saved["optimizer"].keys() == reference["optimizer"].keys()
    groups = saved["optimizer"]["optimizer"]["param_groups"]
    assert all(type(g["lr"]) is float for g in groups)  # not graph mode's lr tensors
    mixed = rh.train_resumed(config(tmp_path / "mixed", graph=then))
    assert mixed.iter == N
    for key, value in eager.unwrapped_model.state_dict().items():
        torch.testing.assert_close(mixed.unwrapped_model.state_dict()[key], value,
                                   rtol=1e-4, atol=1e-5, msg=key)


def test_evaluation_is_compiled_without_recompiling_training(tmp_path):
    cfg = copy.deepcopy(config(tmp_path, graph=True))
    cfg["train_cfg"] = dict(type="IterBasedTrainLoop", max_iters=N, val_interval=4)
    cfg["val_dataloader"] = dict(cfg["train_dataloader"], sampler=dict(type="DefaultSampler", shuffle=False))
    cfg["val_evaluator"] = dict(type="Accuracy")
    cfg["val_cfg"] = dict(type="ValLoop")
    runner = rh.train(cfg)
    assert "eval" in runner.model.compile_seconds  # the evaluation step ran compiled
    assert runner.model.training_recompiles == 0  # and training kept its graph


def test_graph_optim_wrapper_options_pass_through_the_config(tmp_path):
    """paramwise groups each get their own lr tensor; verify_steps checks that many steps."""
    cfg = config(tmp_path, graph=True)
    cfg["optim_wrapper"].update(paramwise_cfg=dict(bias_lr_mult=2.0), verify_steps=2,
                                compile=dict(backend="aot_eager"))
    cfg["log_level"] = "INFO"
    records = rh.LogRecords()
    import logging

    logging.getLogger("libai").addHandler(records)
    try:
        runner = rh.train(cfg)
    finally:
        logging.getLogger("libai").removeHandler(records)
    groups = runner.optim_wrapper.param_groups
    assert len(groups) == 2 and all(isinstance(g["lr"], torch.Tensor) for g in groups)
    assert groups[1]["initial_lr"] == pytest.approx(2 * groups[0]["initial_lr"])
    checks = [m for m in records.messages if m.startswith("Graph mode parity check")]
    assert [m.split(":")[0] for m in checks] == ["Graph mode parity check, step 1",
                                                 "Graph mode parity check, step 2"]
