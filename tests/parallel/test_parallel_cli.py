"""The parallel key through the tools: FSDP2 on two processes trains, checkpoints sharded and
tests; one process reads the sharded checkpoint as it is and converted to one file, with the
same metrics; a lost shard is one clear line. (Graph mode on FSDP2 against one eager process:
the fsdp+graph row of tests/parallel/test_parity.py.)"""

import os
import re
import subprocess
import sys

import pytest
import torch

from libai.checkpoint import load_checkpoint
from libai.parallel import apply_tensor_parallel
from libai.utils.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGITS = os.path.join(ROOT, "configs", "digits_mlp.py")
SHORT = ["train_cfg.max_iters=30", "train_cfg.val_interval=30", "default_hooks.checkpoint.interval=30",
         "default_hooks.logger.interval=10"]


def tool(*args, launcher=()):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *launcher, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def metrics_of(log):
    return {k: float(v) for k, v in re.findall(r"(test/\w+): ([0-9.]+)", log)}


def test_tensor_parallel_needs_a_plan():
    class Mesh:
        def size(self):
            return 2

    with pytest.raises(ConfigError, match="no module of Sequential declares a tp_plan"):
        apply_tensor_parallel(torch.nn.Sequential(torch.nn.Linear(2, 2)), Mesh())


TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    """One eager FSDP2 training of digits on 2 processes: its work dir and its output. The 359
    validation samples are not padded: 180 and 179 per process, in batches of 179, so rank 0
    has 2 batches and rank 1 one, and rank 1 runs a filler forward for FSDP's all-gathers."""
    work = tmp_path_factory.mktemp("fsdp")
    run = tool(os.path.join(ROOT, "tools", "train.py"), DIGITS, "--work-dir", str(work),
               "--cfg-options", "parallel.fsdp=2", "val_dataloader.batch_size=179", *SHORT,
               launcher=TORCHRUN)
    assert run.returncode == 0, run.stderr[-3000:]
    return work, run.stdout


@pytest.mark.slow
def test_fsdp_run_checkpoint_converted_and_tested_in_one_process(fsdp_run, tmp_path):
    work, stdout = fsdp_run
    assert "Parallel: fsdp over 2 process(es)" in stdout
    assert "samples: 359" in stdout and "samples: 270" in stdout  # each sample once
    ckpt = work / "iter_30.pth"
    assert load_checkpoint(ckpt)["sharded"]["world_size"] == 2 and (work / "iter_30.dcp").is_dir()
    expected = metrics_of(stdout)
    assert expected["test/accuracy"] > 0.5, stdout[-2000:]  # learning (random: 0.1)

    direct = tool(os.path.join(ROOT, "tools", "test.py"), DIGITS, str(ckpt), "--work-dir",
                  str(tmp_path / "t1"))
    assert direct.returncode == 0, direct.stderr[-3000:]
    one_file = tmp_path / "one.pth"
    convert = tool(os.path.join(ROOT, "tools", "convert_checkpoint.py"), "sharded2file", str(ckpt),
                   str(one_file))
    assert convert.returncode == 0, convert.stderr[-3000:]
    assert "sharded" not in load_checkpoint(one_file)
    converted = tool(os.path.join(ROOT, "tools", "test.py"), DIGITS, str(one_file), "--work-dir",
                     str(tmp_path / "t2"))
    assert converted.returncode == 0, converted.stderr[-3000:]
    # the sharded checkpoint and its one-file conversion hold the same weights: the same metrics
    assert metrics_of(direct.stdout) == metrics_of(converted.stdout)
    # and they are the weights the 2-process run tested: the same metrics in one process (the
    # loss is the mean over the samples, whatever the batches and processes)
    assert metrics_of(direct.stdout) == expected

    os.remove(work / "iter_30.dcp" / "__1_0.distcp")  # one rank's shard lost
    lost = tool(os.path.join(ROOT, "tools", "test.py"), DIGITS, str(ckpt), "--work-dir",
                str(tmp_path / "t3"))
    assert lost.returncode == 2 and "Traceback" not in lost.stderr, lost.stderr[-3000:]
    assert "__1_0.distcp" in lost.stderr and "is missing (one rank's shard lost" in lost.stderr
