"""How the suite runs the tools and starts processes (tests/README.md, "Processes").

Three ways, cheapest first; each returns what :class:`subprocess.CompletedProcess` holds
(``returncode``, ``stdout``, ``stderr``), so a test reads them alike:

- :func:`run_tool`: ``python tools/X.py ARGS`` (or ``benchmarks/X.py``, or the ``libai`` command)
  run in this process, as Python would run it: ``sys.argv``, the script's folder first on
  ``sys.path``, ``__main__``, the working directory and environment given, its output captured,
  its exit status read from ``SystemExit``. It saves the 2-4 s of a new interpreter importing
  torch, and goes through the same ``main(argv)`` and ``run_cli`` as the command.
- :func:`spawn_ranks`: N ranks of a distributed run, each a fork of this process (torch already
  imported) with the environment torchrun gives its workers (``RANK``, ``WORLD_SIZE``,
  ``MASTER_PORT``...), each running the script in-process. What torchrun adds (its agent, restarts,
  signal forwarding) is proven by the tests that launch it (:func:`torchrun`).
- :func:`run_process` and :func:`torchrun`: a real interpreter, for what only a process shows (the
  installed command, signals, exit at interpreter shutdown, torchrun itself).

The fixtures of tests/conftest.py hand these to tests; a test that asks for ``run_process``,
``torchrun`` or ``spawn_ranks`` is marked slow by that (tests/conftest.py, SLOW_FIXTURES).

"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import runpy
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
TORCHRUN = ("-m", "torch.distributed.run", "--standalone")
_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGUSR1", None),
                             getattr(signal, "SIGHUP", None)) if s is not None)


@dataclass
class ToolRun:
    """What a run printed and its exit status (the fields of ``subprocess.CompletedProcess``)."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    exception: BaseException | None = field(default=None, repr=False)  # run_tool: a bug's
    value: Any = field(default=None, repr=False)  # spawn_ranks with a function: its return

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def check(self) -> ToolRun:
        """Self, or AssertionError with the command and the end of its output."""
        assert self.returncode == 0, (
            f"`{shlex.join(self.args)}` exited {self.returncode}:\n{self.output[-4000:]}")
        return self


def _script_path(script: str | os.PathLike, cwd: Path) -> str:
    path = Path(script)
    if not path.is_absolute():
        path = (cwd / path) if (cwd / path).exists() else ROOT / path
    return str(path)


@contextlib.contextmanager
def _process_state(cwd: Path, env: dict[str, str] | None, argv: list[str],
                   path0: str | None) -> Iterator[None]:
    """The working directory, environment, argv and sys.path of a run, and everything a run may
    change for the rest of the process (signal handlers, torch's threads, determinism and RNG,
    the libai logger), put back afterwards."""
    import logging

    import torch

    saved_cwd, saved_argv, saved_path = os.getcwd(), sys.argv, list(sys.path)
    saved_env = dict(os.environ)
    saved_signals = {s: signal.getsignal(s) for s in _SIGNALS}
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    rng = torch.get_rng_state()
    logger = logging.getLogger("libai")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    os.chdir(cwd)
    os.environ.update(env or {})
    sys.argv = argv
    if path0 is not None:
        sys.path.insert(0, path0)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.environ.clear()
        os.environ.update(saved_env)
        for s, handler in saved_signals.items():
            if handler is not None:
                signal.signal(s, handler)
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_rng_state(rng)
        for h in list(logger.handlers):
            if h not in handlers:
                logger.removeHandler(h)
                h.close()
        logger.setLevel(level)
        logger.propagate = propagate


def _exit_status(e: SystemExit, err: io.StringIO) -> int:
    if isinstance(e.code, int):
        return e.code
    if e.code is None:
        return 0
    err.write(f"{e.code}\n")  # sys.exit("message"): Python prints it and exits 1
    return 1


def _run_here(script: str, args: Sequence[str]) -> tuple[int, BaseException | None, str, str]:
    """Run ``script`` (or the ``libai`` command) as ``__main__`` with output captured."""
    out, err = io.StringIO(), io.StringIO()
    status, bug = 0, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings():
        warnings.simplefilter("default")  # printed as Python prints them, not pytest's record
        warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
        try:
            if script == "libai":
                from libai.cli import main as libai_main

                sys.exit(libai_main(list(args)))
            runpy.run_path(script, run_name="__main__")
        except SystemExit as e:
            status = _exit_status(e, err)
        except BaseException as e:  # noqa: BLE001 - an uncaught error: Python prints and exits 1
            traceback.print_exc(file=err)
            status, bug = 1, e
    return status, bug, out.getvalue(), err.getvalue()


def run_tool(script: str | os.PathLike, *args: Any, cwd: str | os.PathLike | None = None,
             env: dict[str, str] | None = None) -> ToolRun:
    """``python SCRIPT ARGS`` run in this process (see the module docstring).

    Args:
        script: ``tools/train.py`` (relative to ``cwd``, else to the checkout), an absolute path,
            or ``"libai"`` for the installed command.
        *args: The command-line arguments (converted with ``str``).
        cwd: The working directory of the run. Defaults to the checkout.
        env: Environment variables set for the run. Defaults to None.

    Returns:
        The run's exit status and output; ``exception`` holds an uncaught error (a bug: the
        traceback is in ``stderr`` too, and the status is 1).
    """
    cwd = Path(cwd or ROOT)
    argv = [str(a) for a in args]
    path = "libai" if str(script) == "libai" else _script_path(script, cwd)
    path0 = None if path == "libai" else str(Path(path).parent)
    with _process_state(cwd, env, [path, *argv], path0):
        status, bug, out, err = _run_here(path, argv)
    return ToolRun([str(script), *argv], status, out, err, bug)


def child_env(env: dict[str, str] | None = None, pythonpath: str | os.PathLike | None = None
              ) -> dict[str, str]:
    """The environment of a child process: this one's, one thread (the workers of xdist share
    the cores), ``pythonpath`` in front of PYTHONPATH, then ``env``."""
    out = dict(os.environ, OMP_NUM_THREADS="1")
    if pythonpath:
        out["PYTHONPATH"] = os.pathsep.join(p for p in (str(pythonpath), out.get("PYTHONPATH"))
                                            if p)
    out.update(env or {})
    return out


def run_process(*args: Any, cwd: str | os.PathLike | None = None,
                env: dict[str, str] | None = None, timeout: float = 600,
                python: bool = True, **kwargs: Any) -> ToolRun:
    """A real process: ``python ARGS`` (``python=False``: ``ARGS`` as the command), captured.

    ``env`` is added to :func:`child_env`'s; ``kwargs`` go to :func:`subprocess.run` (``input``).
    """
    cmd = [PYTHON, *map(str, args)] if python else [str(a) for a in args]
    proc = subprocess.run(cmd, cwd=cwd or ROOT, env=child_env(env), capture_output=True,
                          text=True, timeout=timeout, **kwargs)
    return ToolRun(cmd, proc.returncode, proc.stdout, proc.stderr)


def torchrun(nproc: int, *args: Any, cwd: str | os.PathLike | None = None,
             env: dict[str, str] | None = None, timeout: float = 600,
             launcher: Sequence[str] = (), **kwargs: Any) -> ToolRun:
    """``torchrun --standalone --nproc_per_node NPROC [LAUNCHER...] ARGS`` as a real process
    (``kwargs`` go to :func:`subprocess.run`)."""
    return run_process(*TORCHRUN, f"--nproc_per_node={nproc}", *launcher, *args, cwd=cwd,
                       env=env, timeout=timeout, **kwargs)


# ------------------------------------------------------------------------------ forked ranks
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RankRuns:
    """The ranks of :func:`spawn_ranks`: each one's run, and their output together."""

    ranks: list[ToolRun]

    @property
    def returncode(self) -> int:
        """The first nonzero status, as torchrun reports a failed worker's (0 if none)."""
        return next((r.returncode for r in self.ranks if r.returncode), 0)

    @property
    def stdout(self) -> str:
        return "".join(r.stdout for r in self.ranks)

    @property
    def stderr(self) -> str:
        return "".join(r.stderr for r in self.ranks)

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def check(self) -> RankRuns:
        for rank, run in enumerate(self.ranks):
            assert run.returncode == 0, f"rank {rank} exited {run.returncode}:\n{run.output[-4000:]}"
        return self


def _rank_main(target: str | Callable[..., Any], args: Sequence[Any], out: Path) -> int:
    """In a forked rank: run ``target``, write its return value, give the exit status."""
    if callable(target):
        try:
            value = target(*args)
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out.write_bytes(pickle.dumps(value))
        return 0
    sys.argv = [target, *map(str, args)]
    sys.path.insert(0, str(Path(target).parent))
    try:
        runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def import_before_forking() -> None:
    """Import once, here, what every rank of a run imports (torch._dynamo comes with
    ``torch.use_deterministic_algorithms`` and the optimizers, the distributed modules with the
    parallel layouts): forked ranks then find them imported instead of each spending seconds."""
    import torch._dynamo  # noqa: F401
    import torch.distributed.checkpoint  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401
    import torch.nn.parallel  # noqa: F401

    import libai.cli.train  # noqa: F401


def spawn_ranks(nproc: int, target: str | os.PathLike | Callable[..., Any], *args: Any,
                cwd: str | os.PathLike | None = None, env: dict[str, str] | None = None,
                timeout: float = 600) -> RankRuns:
    """A distributed run of ``nproc`` ranks forked from this process, without torchrun.

    Each rank gets the environment torchrun gives a worker (``RANK``, ``LOCAL_RANK``,
    ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``; one thread) plus
    ``env``, and runs ``target``: a script path (``tools/train.py``, run as ``__main__`` with
    ``args`` as its arguments) or a function called with ``args`` (its return value, pickled,
    comes back as ``RankRuns.ranks[i].value``).

    Ranks that outlive ``timeout`` are killed (status -9), so a hang fails instead of waiting for
    the collective timeout.
    """
    cwd = Path(cwd or ROOT)
    script = None if callable(target) else _script_path(target, cwd)
    import_before_forking()
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="libai-ranks-"))
    pids = []
    for rank in range(nproc):
        rank_env = dict(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                        LOCAL_WORLD_SIZE=str(nproc), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port), OMP_NUM_THREADS="1", **(env or {}))
        for stream in ("out", "err"):
            (tmp / f"{rank}.{stream}").touch()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the rank: never returns into pytest
            status = 1
            try:
                os.chdir(cwd)
                os.environ.update(rank_env)
                for fd, stream in ((1, "out"), (2, "err")):
                    f = os.open(tmp / f"{rank}.{stream}", os.O_WRONLY | os.O_TRUNC)
                    os.dup2(f, fd)
                    os.close(f)
                sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
                sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
                import torch

                torch.set_num_threads(1)
                status = _rank_main(script or target, args, tmp / f"{rank}.value")
            except BaseException:  # noqa: BLE001 - printed like an uncaught error
                traceback.print_exc()
            finally:
                with contextlib.suppress(Exception):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(status if isinstance(status, int) and 0 <= status < 256 else 1)
        pids.append(pid)
    statuses = _wait_all(pids, timeout)
    runs = []
    for rank, status in enumerate(statuses):
        value_file = tmp / f"{rank}.value"
        value = pickle.loads(value_file.read_bytes()) if value_file.exists() else None
        runs.append(ToolRun([str(target), *map(str, args)], status,
                            (tmp / f"{rank}.out").read_text(), (tmp / f"{rank}.err").read_text(),
                            value=value))
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    return RankRuns(runs)


def _wait_all(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    statuses: dict[int, int] = {}
    while len(statuses) < len(pids):
        for pid in pids:
            if pid in statuses:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                statuses[pid] = os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            for pid in pids:
                if pid not in statuses:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    statuses[pid] = -signal.SIGKILL
        elif len(statuses) < len(pids):
            time.sleep(0.01)
    return [statuses[p] for p in pids]
