"""Suite-wide settings: the two tiers, how tests start processes, one thread, the text cache,
and how xdist spreads the tests (tests/README.md says why each is so)."""

import functools
import hashlib
import importlib.util
import logging
import multiprocessing.util
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tool_runs
import torch

ROOT = Path(__file__).resolve().parents[1]

# One intra-op thread in every test process and its children: the xdist workers share the cores,
# and on tiny models threads only wait for each other.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
# cuBLAS reads its workspace setting at a process's first call, and the in-process runs share
# one: set here, the deterministic runs of the resume proofs get it wherever they run on CUDA
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
# A suite run inside a Slurm job: a test that stops a run with SIGUSR1 must not requeue that job
# (libai/runner/slurm.py), nor a run read the job's tasks as its ranks
for _name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID", "SLURM_STEPID"):
    os.environ.pop(_name, None)
# platform.platform() runs `uname -p` once and caches it; the runner's environment line asks for
# it, so it is asked here, before the fast-tier guard refuses processes
platform.platform()

# The device the tests' runs use: the one the runner picks (device="auto": CUDA where there is a
# GPU). LIBAI_TEST_DEVICE=cpu hides the GPUs from the whole suite; =cuda requires one. A test whose
# claim is about the CPU says device="cpu"; one that checks the math compares on `test_device`
# with the tolerance that device's kernels need; CUDA-only checks carry the `gpu` marker.
_ASKED_DEVICE = os.environ.get("LIBAI_TEST_DEVICE", "auto")
if _ASKED_DEVICE not in ("auto", "cpu", "cuda"):
    raise pytest.UsageError(f"LIBAI_TEST_DEVICE={_ASKED_DEVICE!r}: use auto, cpu or cuda.")
if _ASKED_DEVICE == "cpu":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before anything initialises CUDA
elif _ASKED_DEVICE == "cuda" and not torch.cuda.is_available():
    raise pytest.UsageError("LIBAI_TEST_DEVICE=cuda but torch sees no GPU here.")
TEST_DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture
def test_device() -> torch.device:
    """The device the runner picks in this suite (see TEST_DEVICE)."""
    return TEST_DEVICE


# A test that asks for one of these is slow (-m "not slow" leaves it out): each starts a process,
# compiles with inductor or trains a shipped config. Marked here, by the fixture, never by hand;
# the fast tier refuses the same things done without the fixture (_fast_tier_guard).
SLOW_FIXTURES = ("run_process", "torchrun", "spawn_ranks", "inductor", "shipped_config")


def pytest_collection_modifyitems(config, items):
    no_gpu = pytest.mark.skip(reason="a CUDA-only check (gpu marker): this machine has no GPU")
    for item in items:
        if TEST_DEVICE.type != "cuda" and item.get_closest_marker("gpu") is not None:
            item.add_marker(no_gpu)
        if item.path.suffix == ".md" or SLOW_FIXTURES_USED(item):
            item.add_marker(pytest.mark.slow)
    # The slow ones first, so that two workers do not end on one long test; a stable sort keeps
    # the blocks of a docs page in order.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def SLOW_FIXTURES_USED(item) -> bool:  # noqa: N802 - read as a rule
    return any(name in getattr(item, "fixturenames", ()) for name in SLOW_FIXTURES)


# ------------------------------------------------------------------------------ xdist
# Tests whose rows share a module fixture that does the work once per group (a model's parity
# rows: its references and one torchrun launch): node id prefix, then the row's parameter id up to
# its first "/" names the group. (xdist_group marks cannot do it: pytest 9.2 no longer lets
# xdist add the group to the node id.)
GROUPED = ("tests/parallel/test_parity.py::test_layout_equals_one_process[",)


def pytest_xdist_make_scheduler(config, log):
    """Each test is a unit of work of its own, except a docs page (its blocks share a sandbox
    and run in order) and the rows of a group (:data:`GROUPED`), which go to one worker."""
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            if path.endswith(".md"):
                return path
            for prefix in GROUPED:
                if nodeid.startswith(prefix):
                    return prefix + nodeid[len(prefix):].split("/", 1)[0]
            return nodeid

    config.option.loadscopereorder = False  # keep the order of pytest_collection_modifyitems
    return Scheduling(config, log)


# ------------------------------------------------------------------------------ processes
@pytest.fixture
def run_tool():
    """``run_tool("tools/train.py", *args, cwd=..., env=...)``: the tool in this process
    (tool_runs.run_tool); returns ``returncode``, ``stdout``, ``stderr``."""
    return tool_runs.run_tool


@pytest.fixture
def run_process():
    """``run_process(*args, cwd=..., env=...)``: ``python ARGS`` as a real process. Slow."""
    return tool_runs.run_process


@pytest.fixture
def torchrun():
    """``torchrun(nproc, *args, cwd=..., env=...)``: a real torchrun launch. Slow."""
    return tool_runs.torchrun


@pytest.fixture
def spawn_ranks():
    """``spawn_ranks(nproc, "tools/train.py", *args)``: ranks forked from this process, without
    torchrun (tool_runs.spawn_ranks). Slow."""
    return tool_runs.spawn_ranks


@pytest.fixture
def inductor():
    """Marks a test that compiles with inductor (a C++ build: tens of seconds). Slow."""
    return "inductor"


@pytest.fixture
def shipped_config():
    """``shipped_config(name, *options)``: configs/NAME.py with ``--cfg-options`` applied, for a
    test that trains it. Slow."""
    from libai.config import Config

    def load(name, *options):
        cfg = Config.fromfile(ROOT / "configs" / f"{name}.py")
        if options:
            cfg.merge_from_options(list(options))
        return cfg

    return load


_DIGITS = ("digits_mlp",)  # in-process they train in a fraction of a second: fast tier


@pytest.fixture(autouse=True)
def _fast_tier_guard(request, monkeypatch):
    """In a test not marked slow, starting a process, compiling with inductor or training a
    shipped config fails and names the fixture that makes it slow: the fast tier stays fast
    without anyone remembering to mark a test."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    name = request.node.nodeid

    def no_process(self, args, *a, **k):
        pytest.fail(f"{name} starts a process ({args!r}) but is not slow: start it with the "
                    f"run_process, torchrun or spawn_ranks fixture (tests/conftest.py), or run "
                    f"the tool in-process with run_tool.", pytrace=False)

    monkeypatch.setattr(subprocess.Popen, "_execute_child", no_process)
    # multiprocessing's spawn and forkserver start a new interpreter without subprocess
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds",
                        lambda path, args, fds: no_process(None, args))
    compile_ = torch.compile

    @functools.wraps(compile_)  # its signature stays torch.compile's (graph mode reads its keys)
    def no_inductor(*args, backend="inductor", **kwargs):
        if backend == "inductor":
            pytest.fail(f"{name} compiles with inductor but is not slow: use backend="
                        f"'aot_eager', or ask for the inductor fixture.", pytrace=False)
        return compile_(*args, backend=backend, **kwargs)

    monkeypatch.setattr(torch, "compile", no_inductor)
    from libai.runner import Runner

    init = Runner.__init__

    def no_shipped(self, cfg, *args, **kwargs):
        filename = getattr(cfg, "filename", None)
        if filename and Path(filename).resolve().parent.is_relative_to(ROOT / "configs") \
                and not Path(filename).stem.startswith(_DIGITS):
            pytest.fail(f"{name} trains the shipped config {Path(filename).name} but is not "
                        f"slow: load it with the shipped_config fixture.", pytrace=False)
        init(self, cfg, *args, **kwargs)

    monkeypatch.setattr(Runner, "__init__", no_shipped)
    yield


# ------------------------------------------------------------------------------ caches
def _text_cache_key() -> str:
    """The code that builds corpora and tokenizers, and the tokenizers release: a change to
    either makes a new cache folder."""
    import tokenizers

    digest = hashlib.blake2b(tokenizers.__version__.encode(), digest_size=6)
    for path in sorted((ROOT / "libai" / "data" / "text").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="session", autouse=True)
def _text_cache():
    # The text configs build the built-in corpus and its tokenizer on first use (seconds each).
    # The suite keeps them between pytest runs in the checkout's git-ignored .cache/ folder,
    # never the user's ~/.cache, under a key of the code that builds them; child processes
    # inherit it, and xdist workers share it through the cache's own file lock
    # (libai/data/text/sources.py).
    old = os.environ.get("LIBAI_CACHE_DIR")
    cache = ROOT / ".cache" / "tests" / f"text-{_text_cache_key()}"
    cache.mkdir(parents=True, exist_ok=True)
    for stale in cache.parent.glob("text-*"):  # built by code that has changed since
        if stale != cache:
            shutil.rmtree(stale, ignore_errors=True)
    os.environ["LIBAI_CACHE_DIR"] = str(cache)
    yield
    if old is None:
        os.environ.pop("LIBAI_CACHE_DIR", None)
    else:
        os.environ["LIBAI_CACHE_DIR"] = old


# ------------------------------------------------------------------------------ the rest
@pytest.fixture(scope="session")
def load_script():
    """``load_script(path, name)``: a script of tools/ or benchmarks/ (not packages) imported as
    the module ``name``, registered in sys.modules (dataclasses look their module up there)."""
    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        module = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(autouse=True)
def _drop_run_log_files():
    # each Runner adds a file handler for its run folder to the libai logger; drop them between
    # tests so that a test's log never goes to another test's folder
    yield
    logger = logging.getLogger("libai")
    for h in list(logger.handlers):
        if isinstance(h, logging.FileHandler):
            logger.removeHandler(h)
            h.close()


@pytest.fixture
def libai_log():
    """The messages the libai logger emits during the test, in order.

    caplog cannot see them: once a Runner has set the libai logger up it does not propagate to the
    root logger, where caplog listens.
    """
    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("libai")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(old_level)
