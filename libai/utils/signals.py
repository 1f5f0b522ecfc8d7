"""Turn termination signals into a stop request that the training loops poll.

A scheduler that wants a job gone (SLURM's ``--signal``, Kubernetes deleting a pod, a spot
instance being reclaimed) sends SIGTERM or SIGUSR1 and, some time later, SIGKILL; a person at the
terminal presses Ctrl-C (SIGINT). The handler installed here only records the first signal (and,
for Ctrl-C, says so on stderr); the loops ask :meth:`StopRequest.poll` at points
where stopping is clean (between training steps, between evaluation batches), and all ranks of a
distributed run agree through one small all-reduce, so one signalled rank is enough and every rank
stops at the same step. A second signal ends the process at once with :func:`exit_status`.

>>> import signal
>>> stop = StopRequest(["SIGUSR1"])
>>> stop.install()
True
>>> _ = signal.raise_signal(signal.SIGUSR1)
>>> stop.poll()  # the signal number, the same on every rank
10
>>> stop.uninstall()
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable
from typing import Any

import torch

from . import dist
from .errors import ConfigError, LibaiError
from .suggest import did_you_mean

__all__ = ["DEFAULT_SIGNALS", "STOP_SIGNALS", "StopRequest", "StopRequested", "Preempted",
           "exit_status", "parse_preemption"]

DEFAULT_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")
# Signals a job is commonly asked to stop with; SIGKILL and SIGSTOP cannot be caught.
STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGHUP", "SIGQUIT")


def exit_status(signum: int) -> int:
    """The exit status after stopping on ``signum``: 128 + its number (143 for SIGTERM, 138 for
    SIGUSR1, 130 for SIGINT), what a shell reports for a process ended by that signal."""
    return 128 + int(signum)


class Preempted(LibaiError):
    """Training stopped on a signal (a checkpoint of the stop iteration written, unless the log
    line says otherwise). ``tools/train.py`` exits with :attr:`exit_status` and no traceback.

    Args:
        signum: The signal that asked the run to stop.
        message: The line already logged by the runner.
    """

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.signum = int(signum)
        self.exit_status = exit_status(signum)


class StopRequested(Exception):  # noqa: N818 - a request, not an error
    """Raised by an evaluation loop that a stop request interrupted; the training loop around it
    catches it and stops training at its current iteration."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stop requested by signal {signum}")
        self.signum = int(signum)


def parse_preemption(value: Any, path: str = "preemption") -> tuple[str, ...]:
    """The signal names of the ``preemption`` config key; an empty tuple turns handling off.

    ``None``/``False`` turn it off; ``True`` or a missing key mean the defaults;
    ``dict(signals=[...])`` names the signals.

    Raises:
        ConfigError: an unknown key, a signal that is not one of :data:`STOP_SIGNALS`.
    """
    if value is None or value is False:
        return ()
    if value is True:
        return DEFAULT_SIGNALS
    if not isinstance(value, dict):
        raise ConfigError(f"{path} must be None (off) or dict(signals=[...]), got {value!r}; "
                          f"e.g. {path}=dict(signals={list(DEFAULT_SIGNALS)}).")
    for key in value:
        if key != "signals":
            raise ConfigError(f"Unknown key '{path}.{key}'.{did_you_mean(str(key), ['signals'])} "
                              f"{path} takes dict(signals=[...]).")
    names = value.get("signals", DEFAULT_SIGNALS)
    if isinstance(names, str) or not isinstance(names, list | tuple):
        raise ConfigError(f"{path}.signals must be a list of signal names such as "
                          f"{list(DEFAULT_SIGNALS)}, got {names!r}.")
    for name in names:
        if name not in STOP_SIGNALS:
            hint = did_you_mean(str(name), STOP_SIGNALS) if isinstance(name, str) else ""
            raise ConfigError(f"{path}.signals: {name!r} is not a signal libai can stop on.{hint} "
                              f"Choose among {', '.join(STOP_SIGNALS)}.")
    return tuple(dict.fromkeys(names))


class StopRequest:
    """Records the first of ``signals``; :meth:`poll` reports it, agreed across ranks.

    Args:
        signals: Signal names, e.g. ``["SIGTERM", "SIGUSR1"]``. Defaults to :data:`DEFAULT_SIGNALS`.
    """

    def __init__(self, signals: Iterable[str] = DEFAULT_SIGNALS) -> None:
        self.signals = tuple(getattr(signal, name) for name in signals)
        self.received = 0  # the first signal's number; written only by the handler
        self._previous: dict[int, Any] = {}
        self._owner = os.getpid()  # the process that installed the handlers
        self._announce = True  # rank 0 says what a Ctrl-C does
        self._group: Any = None
        self._distributed = False

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> bool:
        """Install the handlers (the previous ones are kept for :meth:`uninstall`). Every rank
        calls it. Returns False outside the main thread, where Python cannot install them."""
        if self.installed or not self.signals:
            return self.installed
        if threading.current_thread() is not threading.main_thread():
            return False
        self.received = 0
        self._owner = os.getpid()
        self._announce = dist.get_rank() == 0
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        self._distributed = dist.get_world_size() > 1
        if self._distributed and self._group is None and torch.distributed.get_backend() == "nccl":
            # a CPU-side group: agreeing on a flag must not wait for the GPU every step
            self._group = torch.distributed.new_group(backend="gloo")
        return True

    def uninstall(self) -> None:
        """Put the previous handlers back (a signal received stays in :attr:`received`)."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        # Only a flag: the loops act on it where stopping is safe.
        if os.getpid() != self._owner:
            return  # a forked child (a data loader worker, same terminal): the main process acts
        if self.received:
            name = signal.Signals(signum).name
            os.write(2, f"libai: second signal ({name}): exiting at once with status "
                        f"{exit_status(signum)}; no checkpoint of this step is written, the "
                        f"last complete one is kept.\n".encode())
            os._exit(exit_status(signum))
        self.received = signum
        if signum == signal.SIGINT and self._announce:  # a person waits: say what happens
            os.write(2, b"libai: Ctrl-C: finishing this step and saving it, then stopping; press "
                        b"Ctrl-C again to exit at once without saving.\n")

    def poll(self) -> int:
        """The signal number if any rank received one, else 0. In a distributed run every rank
        must call it at the same point (one all-reduce of one number)."""
        if not self._distributed:
            return self.received
        flag = torch.tensor([self.received], dtype=torch.int64)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=self._group)
        return int(flag.item())
