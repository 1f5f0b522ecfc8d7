"""tools/train.py --graph as a user runs it (in this process: run_tool): same accuracy as eager,
the compile report in the log, --graph --amp, and two ranks (compiled DDP, gloo on the CPU).

The first test is the suite's one inductor test (the user's default backend: a C++ build, tens of
seconds cold); every other graph-mode test compiles with aot_eager (the same graphs without the
build)."""

import json
import os
import re

import torch

from libai.checkpoint import load_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICK = os.path.join(ROOT, "configs", "digits_mlp.py")
SHORT = ["--cfg-options", "train_cfg.max_iters=300", "train_cfg.val_interval=300",
         "default_hooks.logger.interval=100", "+default_hooks.logger.plot=False"]
AOT_EAGER = "+optim_wrapper.compile.backend=aot_eager"


def val_accuracy(work):
    from libai.utils.run_layout import training_scalars

    rows = [json.loads(line) for line in open(training_scalars(str(work)))]
    return [r["val/accuracy"] for r in rows if "val/accuracy" in r][-1]


def test_graph_trains_to_the_accuracy_of_eager_and_reports_what_it_compiled(run_tool, inductor,
                                                                            tmp_path):
    """Inductor's kernels for the forward, the backward and the update (accumulating 2 micro-
    batches, clipping: digits_mlp clips at 5.0), dropout on (digits_mlp's 0.1) drawn as eager
    draws it (exact_random: a different draw fails the step-1 parity check, which stops the run),
    a new lr every step without a recompile."""
    accumulate = "+optim_wrapper.accumulative_counts=2"
    run_tool("tools/train.py", QUICK, "--work-dir", tmp_path / "eager", *SHORT, accumulate).check()
    graph = run_tool("tools/train.py", QUICK, "--graph", "--work-dir", tmp_path / "graph",
                     *SHORT, accumulate).check()
    log = graph.output
    assert "GraphOptimWrapper" in log and "accumulative_counts=2" in log
    assert re.search(r"Graph mode parity check, step 1: loss [\d.]+ compiled vs [\d.]+ eager, "
                     r"gradient norm [\d.]+ vs [\d.]+: equal within rtol", log)
    assert "the update (clipping, optimizer step) compiled in" in log
    assert re.search(r"the training step is compiled: .*; \d+ graph break\(s\), 0 recompile", log)
    # announced before the wait, and its end with the time it took (issue 27)
    assert log.count("Graph mode: compiling the training step now.") == 1
    assert re.search(r"Graph mode: the training step is compiled: its first call took [\d.]+ s "
                     r"\(forward [\d.]+ s, backward and update [\d.]+ s\); \d+ graph break", log)
    assert log.count("FLOPs per training step: unknown (graph mode") == 1
    assert "Graph mode (end of run)" in log and "eval" in log.split("Graph mode (end of run)")[1]
    assert "Traceback" not in log and "torch.compile failed" not in log
    assert abs(val_accuracy(tmp_path / "graph") - val_accuracy(tmp_path / "eager")) <= 0.01
    a = load_checkpoint(tmp_path / "eager" / "iter_300.pth")
    b = load_checkpoint(tmp_path / "graph" / "iter_300.pth")
    assert a["state_dict"].keys() == b["state_dict"].keys()  # step-level closeness: tests/optim


def test_graph_with_amp_is_bfloat16_on_the_cpu(run_tool, tmp_path):
    # the flags end to end; inductor's bf16 kernels are compared with eager in tests/optim
    out = run_tool("tools/train.py", QUICK, "--graph", "--amp", "--fast-dev-run",
                   "--work-dir", tmp_path, "--cfg-options", AOT_EAGER).check()
    assert "dtype=bfloat16" in out.output and "equal within rtol=0.02" in out.output


def test_two_processes_compiled_ddp_equal_eager_ddp(spawn_ranks, tmp_path):
    # the math on 2 forked ranks; tools/train.py under torchrun: tests/tools/test_dist_teardown.py
    def ranks(work, *extra):
        return spawn_ranks(2, "tools/train.py", QUICK, "--work-dir", work, *extra,
                           "--cfg-options", "train_cfg.max_iters=12", "train_cfg.val_interval=12",
                           "+default_hooks.logger.plot=False", "param_scheduler.0.end=10",
                           "param_scheduler.1.begin=10", *([AOT_EAGER] if extra else []))

    ranks(tmp_path / "eager").check()
    graph = ranks(tmp_path / "graph", "--graph").check()
    assert "equal within rtol" in graph.output and "torch.compile failed" not in graph.output
    a = load_checkpoint(tmp_path / "eager" / "iter_12.pth")
    b = load_checkpoint(tmp_path / "graph" / "iter_12.pth")
    assert a["meta"]["world_size"] == b["meta"]["world_size"] == 2
    for key, value in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][key], value, rtol=1e-4, atol=1e-5, msg=key)
