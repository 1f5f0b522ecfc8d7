"""The parallel key through the tools: FSDP2 on two processes trains, checkpoints sharded and
tests; one process reads the sharded checkpoint as it is and converted to one file, with the
same metrics; a lost shard is one clear line. The two processes are ranks forked by
spawn_ranks, the tools of the one process run in this process (run_tool); torchrun's own path:
tests/parallel/test_pipeline.py and the parity matrix. (Graph mode on FSDP2 against one eager
process: the fsdp+graph row of tests/parallel/test_parity.py.)"""

import os
import re

import pytest
import torch

from libai.checkpoint import load_checkpoint
from libai.parallel import apply_tensor_parallel
from libai.utils.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGITS = os.path.join(ROOT, "configs", "digits_mlp.py")
NO_PLOTS = "+default_hooks.logger.plot=False"  # no background plot process
SHORT = ["train_cfg.max_iters=30", "train_cfg.val_interval=30", "default_hooks.checkpoint.interval=30",
         "default_hooks.logger.interval=10", NO_PLOTS]


def metrics_of(log, stage="test"):
    return {k.split("/", 1)[1]: float(v) for k, v in re.findall(rf"({stage}/\w+): ([0-9.]+)", log)}


def test_tensor_parallel_needs_a_plan():
    class Mesh:
        def size(self):
            return 2

    with pytest.raises(ConfigError, match="no module of Sequential declares a tp_plan"):
        apply_tensor_parallel(torch.nn.Sequential(torch.nn.Linear(2, 2)), Mesh())


def test_fsdp_run_checkpoint_converted_and_tested_in_one_process(tmp_path, run_tool,
                                                                spawn_ranks):
    """One eager FSDP2 training of digits on 2 processes. The 359 validation samples are not
    padded: 180 and 179 per process, in batches of 179, so rank 0 has 2 batches and rank 1 one,
    and rank 1 runs a filler forward for FSDP's all-gathers."""
    work = tmp_path / "fsdp"
    stdout = spawn_ranks(2, "tools/train.py", DIGITS, "--work-dir", work, "--cfg-options",
                         "parallel.fsdp=2", "val_dataloader.batch_size=179", *SHORT).check().stdout
    assert "Parallel: fsdp over 2 process(es)" in stdout
    assert "samples: 359" in stdout and "samples: 270" in stdout  # each sample once
    ckpt = work / "iter_30.pth"
    assert load_checkpoint(ckpt)["sharded"]["world_size"] == 2 and (work / "iter_30.dcp").is_dir()
    expected = metrics_of(stdout)
    assert expected["accuracy"] > 0.5, stdout[-2000:]  # learning (random: 0.1)

    def test(checkpoint, work, *options):
        return run_tool("tools/test.py", DIGITS, checkpoint, "--work-dir", tmp_path / work,
                        "--cfg-options", NO_PLOTS, *options)

    direct = test(ckpt, "t1").check()
    one_file = tmp_path / "one.pth"
    run_tool("tools/convert_checkpoint.py", "sharded2file", ckpt, one_file).check()
    assert "sharded" not in load_checkpoint(one_file)
    converted = test(one_file, "t2").check()
    # the sharded checkpoint and its one-file conversion hold the same weights: the same metrics
    assert metrics_of(direct.stdout) == metrics_of(converted.stdout)
    # and they are the weights the 2-process run tested: the same metrics in one process (the
    # loss is the mean over the samples, whatever the batches and processes)
    assert metrics_of(direct.stdout) == expected
    # the validation at iteration 30, where rank 1's filler forward must count for nothing, is
    # one process's evaluation of the validation split with the same weights
    val = test(one_file, "v", "test_dataloader.dataset.split=val").check()
    assert "samples: 359" in val.stdout and {"accuracy", "loss"} <= set(metrics_of(val.stdout))
    assert metrics_of(val.stdout) == metrics_of(stdout, "val")

    os.remove(work / "iter_30.dcp" / "__1_0.distcp")  # one rank's shard lost
    lost = test(ckpt, "t3")
    assert lost.returncode == 2 and "Traceback" not in lost.stderr, lost.stderr[-3000:]
    assert "__1_0.distcp" in lost.stderr and "is missing (one rank's shard lost" in lost.stderr
