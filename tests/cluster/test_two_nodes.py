"""Two nodes on one machine (issue 38 item 1; docs/cluster.md): two ``torchrun`` agents, each
``--nnodes 2 --nproc_per_node 2`` meeting at a c10d rendezvous on localhost, form one job of 4
processes, as two machines would. Device: the CPU (gloo); each "node" is an agent with its own
environment (``LIBAI_CACHE_DIR``, the path it reaches the work dir by).

One test holds the two-node claims, because the bit-identical ones compare with its straight run:

- the straight run (one launch of both agents, GPT-2 as HSDP ``parallel.fsdp=2``: data over the
  nodes, FSDP within each; then BERT as DDP over 4) equals one process within the parity matrix's
  tolerance (benchmarks/parity.py: its runs, reader and comparison), BERT's masking included;
- each node's own corpus cache is built once, by one of its processes;
- a worker lost mid-run (node 1's local rank 1, SIGKILL): the agents (``--max-restarts``)
  restart the group, which resumes from the last checkpoint; the nodes share one cache, built
  once by one of the 4 processes;
- a node lost mid-run (its agent and both workers killed with SIGKILL) ends the job; both nodes
  started again with ``--resume`` continue from the last checkpoint. Node 1 names the shared work
  dir by another path (a symlink);
- a node lost mid-run while node 0's agent has restarts to spare (``--max-restarts``): node 1
  alone is started again, joins the waiting node 0 at the rendezvous, and the group continues
  from the last checkpoint.

All end bit-identical to the straight run (weights, optimizer state, loop).

tests/cluster/test_node_cache.py holds the cache's build-once rule where two nodes share a disk
whose lock does not reach across nodes (no ``flock``, or a node-local one).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from tool_runs import PYTHON, ToolRun, child_env

ROOT = Path(__file__).resolve().parents[2]
TRAIN = str(ROOT / "tools" / "train.py")
STEPS, EVERY = 6, 2  # checkpoints at 2, 4, 6
CPU = "+device=cpu"  # every run, the references too: the claims are the CPU's (gloo)
LOSE_AT = 3  # a worker or node is lost after step 3: the resume starts from iter_2


def _parity():
    if "parity" not in sys.modules:  # tests/parallel/test_parity.py may have loaded it
        import importlib.util

        spec = importlib.util.spec_from_file_location("parity", ROOT / "benchmarks" / "parity.py")
        module = sys.modules["parity"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # registered first: its dataclasses look it up
    return sys.modules["parity"]


PARITY = _parity()
PLAN = PARITY.Plan(steps=STEPS, stages=("val",), val_batches=PARITY.SUITE_VAL_BATCHES)
# GPT-2: fsdp=2 within a node, the data over the 2 nodes (HSDP); BERT: plain DDP over 4
ROWS = {"gpt2": (("parallel.fsdp=2",), 4), "bert": ((), 4)}

FAULTS = '''
import os
import signal
from pathlib import Path

from libai.hooks import Hook


class LoseOnNode1Hook(Hook):
    """After step `at`, on node 1 (TEST_NODE), once per job (the marker file names the launch it
    happened in): `what="node"`: its agent (this process's parent) and both its workers die by
    SIGKILL, as a machine that is lost; `what="worker"`: its local rank 1 dies by SIGKILL."""

    priority = "LOWEST"  # after the checkpoint hook of the same step

    def __init__(self, at, marker, what="node"):
        self.at, self.marker, self.what, self.agent = at, Path(marker), what, os.getppid()

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if os.environ.get("TEST_NODE") != "1" or runner.iter + 1 != self.at:
            return
        if self.marker.exists() and self.marker.read_text() != str(self.agent):
            return  # lost in an earlier launch: not again
        if self.what == "worker":
            if os.environ["LOCAL_RANK"] == "1":
                self.marker.write_text("worker")
                os.kill(os.getpid(), signal.SIGKILL)
            return
        self.marker.write_text(str(self.agent))  # the node's other worker acts on it too
        if self.agent > 1:
            try:
                os.kill(self.agent, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.kill(os.getpid(), signal.SIGKILL)
'''


# ------------------------------------------------------------------------------ two agents
def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(args, envs, restarts=0, timeout=240, rejoin=False):
    """Both agents of a 2-node job on localhost (``args``: a list, or ``args(node)``), each
    with ``envs[node]`` and ``--max-restarts restarts``; returns their runs, node 0's first.
    ``rejoin``: once node 1's agent has died by SIGKILL (a lost node), it is started again, and
    its second run comes last.

    Each agent leads a process group of its own: past ``timeout`` the agents and their workers
    are killed (a killed agent alone leaves its workers behind) and the test fails with what each
    node printed."""
    port, rdzv_id = _port(), f"two-nodes-{os.getpid()}-{time.monotonic_ns()}"
    procs, logs = [], []

    def agent(node):
        launcher = ["-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node),
                    "--nproc_per_node", "2", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", rdzv_id,
                    "--max-restarts", str(restarts), "--monitor-interval", "0.1",
                    # on one machine both agents would take the endpoint for their own (two
                    # machines tell by the host name) and try to serve the store
                    "--rdzv-conf", f"is_host={int(node == 0)}"]
        cmd = [PYTHON, *launcher, *map(str, args(node) if callable(args) else args)]
        logs.append(tempfile.TemporaryFile("w+"))
        procs.append(subprocess.Popen(
            cmd, cwd=ROOT, env=child_env({"TEST_NODE": str(node), **envs[node]}),
            stdout=logs[-1], stderr=subprocess.STDOUT, text=True, start_new_session=True))

    agent(0)
    time.sleep(0.5)  # node 0's agent serves the store: it starts first
    agent(1)
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if rejoin and len(procs) == 2 and procs[1].poll() == -signal.SIGKILL:
            agent(1)  # the lost node comes back
        time.sleep(0.2)
    hung = [n for n, p in enumerate(procs) if p.poll() is None]
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)  # the agent and what is left of its workers
        p.wait()
    runs = []
    for p, log in zip(procs, logs, strict=True):
        log.seek(0)
        runs.append(ToolRun(p.args, p.returncode, log.read(), ""))
        log.close()
    assert not hung, (f"agent(s) {hung} still running after {timeout} s, killed:\n"
                      + "\n".join(f"--- agent {n}:\n{r.output[-4000:]}" for n, r in enumerate(runs)))
    return runs


def _env(cache, *paths):
    pythonpath = os.pathsep.join(str(p) for p in (*paths, ROOT, os.environ.get("PYTHONPATH"))
                                 if p)
    # the CPU, whatever the machine has: 4 processes would share its one GPU
    return {"LIBAI_CACHE_DIR": str(cache), "PYTHONPATH": pythonpath, "CUDA_VISIBLE_DEVICES": ""}


def _launcher(envs, seconds):
    def launch(nproc, args):  # benchmarks/parity.py's launcher: both agents, 2 processes each
        assert nproc == 4
        start = time.perf_counter()
        runs = two_nodes(args, envs)
        seconds["straight"] = time.perf_counter() - start
        return max(r.returncode for r in runs), "".join(r.output for r in runs)

    return launch


def _seed_cache(cache: Path, *kinds: str) -> None:
    """Copy the suite's built corpora of ``kinds`` into ``cache`` (the others it builds)."""
    built = Path(os.environ["LIBAI_CACHE_DIR"]) / "text"
    (cache / "text").mkdir(parents=True)
    for folder in built.glob("shakespeare-*-8192-*"):
        if folder.is_dir() and folder.name.split("-")[1] in kinds:
            shutil.copytree(folder, cache / "text" / folder.name)


def _builds(cache: Path) -> list[dict]:
    """Who built each corpus of ``cache`` (meta.json), and nothing half-built left beside."""
    text = cache / "text"
    leftovers = [p.name for p in text.iterdir() if ".tmp-" in p.name or ".incomplete-" in p.name]
    assert not leftovers, leftovers
    return [json.loads((f / "meta.json").read_text()) for f in sorted(text.iterdir()) if f.is_dir()]


def _full_state(path: Path) -> dict:
    """Everything a checkpoint holds that the run computed: the whole sharded state (DCP) or
    the file's model and optimizer."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    from libai.checkpoint import load_checkpoint
    from libai.checkpoint.sharded import check_sharded

    ckpt = load_checkpoint(path)
    if "sharded" not in ckpt:
        return {"model": ckpt["state_dict"], "optim": ckpt["optimizer"], "loop": ckpt["loop"]}
    full = path.parent / f".{path.name}.full.pt"
    dcp_to_torch_save(str(check_sharded(path, ckpt["sharded"])), str(full))
    state = torch.load(full, weights_only=False)
    full.unlink()
    return {**state, "loop": ckpt["loop"]}


def _assert_equal(a, b, where=""):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, set(a) ^ set(b))
        for k in a:
            _assert_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def _gpt2_argv(config: Path, work, one_process: bool = False) -> list[str]:
    """GPT-2's arguments in benchmarks/parity.py's shape (checkpoints every 2), from ``config``."""
    options, shares = ((), 1) if one_process else ROWS["gpt2"]
    argv = PARITY.train_argv("gpt2", Path(work), PLAN, options, (), shares, full=False)
    return [str(config), *argv[1:], f"default_hooks.checkpoint.interval={EVERY}", CPU]


# ------------------------------------------------------------------------------ the test
def test_two_nodes_equal_one_process_and_resume_after_a_lost_worker_or_node(
        tmp_path, run_process, run_tool):  # run_process: it starts processes (slow)
    seconds: dict[str, float] = {}
    plain = tmp_path / "gpt2_two_nodes.py"
    plain.write_text(f"_base_ = [{str(ROOT / 'configs' / 'gpt2_tiny.py')!r}]\n")

    # one process: the references (in this process, tools/train.py's main)
    start = time.perf_counter()
    refs = {}
    for model in ROWS:
        work = tmp_path / f"{model}-one"
        argv = [*PARITY.train_argv(model, work, PLAN, (), (), 1, full=False), CPU]
        if model == "gpt2":
            argv = _gpt2_argv(plain, work, one_process=True)
        run = run_tool("tools/train.py", *argv).check()
        refs[model] = PARITY.read_run(work, run.output, PLAN)
    seconds["one process"] = time.perf_counter() - start

    # the straight two-node run: GPT-2 then BERT in one launch (benchmarks/parity.py's driver),
    # each node with a cache of its own that holds BERT's corpus and builds GPT-2's
    caches = [tmp_path / "node0-cache", tmp_path / "node1-cache"]
    for cache in caches:
        _seed_cache(cache, "wordpiece")
    envs = [_env(c) for c in caches]
    rows = {"gpt2": _gpt2_argv(plain, tmp_path / "gpt2-two"),
            "bert": [*PARITY.train_argv("bert", tmp_path / "bert-two", PLAN, *ROWS["bert"][:1],
                                        (), ROWS["bert"][1], full=False), CPU]}
    done = PARITY.run_rows("two-nodes", 4, rows, tmp_path,
                           _launcher(envs, seconds))
    figures = {}
    for model, (status, output, _) in done.items():
        assert status == 0, output[-5000:]
        assert "world size   4" in output, output[-3000:]
        run = PARITY.read_run(tmp_path / f"{model}-two", output, PLAN)
        result = PARITY.compare(run, refs[model], PARITY.expected_samples(model, PLAN, False))
        figures[model] = {k: result[k] for k in ("loss", "weights", "metrics")}
        lay = PARITY.LAYOUTS["hsdp" if model == "gpt2" else "ddp"]
        assert PARITY.passes(result, lay), (model, result)
    assert "Parallel: hsdp over 4 process(es) (pipeline=1, data=2, fsdp=2, tensor=1)" \
        in done["gpt2"][1]
    # each node's cache: GPT-2's corpus built once there, by one of that node's processes
    # (torchrun's GROUP_RANK: the rendezvous numbers the nodes, not --node_rank)
    built = [[b for b in _builds(cache) if b["tokenizer"]["kind"] == "bpe"] for cache in caches]
    assert [len(b) for b in built] == [1, 1], built
    assert {b[0]["built_by"]["node"] for b in built} == {"0", "1"}, built
    straight = _full_state(tmp_path / "gpt2-two" / f"iter_{STEPS}.pth")

    # a worker lost after step 3 (node 1's local rank 1, SIGKILL): the agents (--max-restarts)
    # restart the group, which resumes from iter_2. The nodes share a cache that nobody built
    # yet: 4 processes, one build
    (tmp_path / "two_node_faults.py").write_text(FAULTS)
    shared = tmp_path / "shared-cache"
    env = _env(shared, tmp_path)

    def faulty(name, what):
        hook = dict(type="two_node_faults.LoseOnNode1Hook", at=LOSE_AT, what=what,
                    marker=str(tmp_path / f"{name}.lost"))
        config = tmp_path / f"gpt2_{name}.py"
        config.write_text(f"_base_ = [{str(plain)!r}]\ncustom_hooks = [{hook!r}]\n")
        return config

    start = time.perf_counter()
    work = tmp_path / "elastic"
    # restarts to spare: a round whose gloo connection fails restarts too (torch's agents)
    runs = two_nodes([TRAIN, *_gpt2_argv(faulty("elastic", "worker"), work), "--resume"],
                     [env, env], restarts=3)
    seconds["worker lost, the agents restart the group"] = time.perf_counter() - start
    log = "".join(r.output for r in runs)
    assert [r.returncode for r in runs] == [0, 0], log[-6000:]
    assert "failed (exitcode: -9) local_rank: 1" in log, log[-6000:]
    assert f"Resumed from {work / 'iter_2.pth'}" in log, log[-4000:]
    built = _builds(shared)
    assert len(built) == 1 and "meanwhile" not in log, built  # one build, none beside it
    _assert_equal(_full_state(work / f"iter_{STEPS}.pth"), straight)

    # node 1 lost after step 3 (its agent and workers killed): the job ends; both nodes
    # started again with --resume continue from iter_2. Node 1 names the shared work dir by
    # another path (a symlink)
    work = tmp_path / "lost"
    config = faulty("lost", "node")
    (tmp_path / "node1-view").symlink_to(tmp_path)
    views = [work, tmp_path / "node1-view" / "lost"]

    def argv(node):
        return [TRAIN, *_gpt2_argv(config, views[node]), "--resume"]

    start = time.perf_counter()
    lost = two_nodes(argv, [env, env])
    seconds["node lost, the job ends"] = time.perf_counter() - start
    log = "".join(r.output for r in lost)
    assert lost[0].returncode != 0 and lost[1].returncode == -signal.SIGKILL, log[-6000:]
    assert not (work / "iter_4.pth").exists() and (work / "iter_2.pth").exists()
    start = time.perf_counter()
    again = two_nodes(argv, [env, env])
    seconds["both nodes started again"] = time.perf_counter() - start
    log = "".join(r.output for r in again)
    assert [r.returncode for r in again] == [0, 0], log[-6000:]
    assert f"Resumed from {work / 'iter_2.pth'}" in log, log[-4000:]
    assert "Building the" not in log and _builds(shared) == built
    _assert_equal(_full_state(work / f"iter_{STEPS}.pth"), straight)

    # node 1 lost after step 3 while node 0's agent has restarts to spare: node 0 waits at the
    # rendezvous, node 1 is started again alone and the group resumes from iter_2. The agents
    # keep no store for the workers (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, docs/cluster.md):
    # torch 2.13's shared store tells its address only to the nodes of the first round
    work = tmp_path / "rejoin"
    config = faulty("rejoin", "node")
    fresh = {**env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    start = time.perf_counter()
    runs = two_nodes([TRAIN, *_gpt2_argv(config, work), "--resume"], [fresh, fresh],
                     restarts=3, rejoin=True)
    seconds["node lost, started again alone"] = time.perf_counter() - start
    log = "".join(r.output for r in runs)
    assert [r.returncode for r in runs] == [0, -signal.SIGKILL, 0], log[-6000:]
    assert f"Resumed from {work / 'iter_2.pth'}" in runs[0].output, log[-4000:]
    _assert_equal(_full_state(work / f"iter_{STEPS}.pth"), straight)
    print(f"two nodes vs one process: {figures}; seconds: "
          f"{ {k: round(v, 1) for k, v in seconds.items()} }")
