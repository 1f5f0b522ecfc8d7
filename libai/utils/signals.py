"""Turn termination signals into a stop request that the training loops poll.

A scheduler that wants a job gone (SLURM's ``--signal``, Kubernetes deleting a pod, a spot
instance being reclaimed) sends SIGTERM or SIGUSR1 and, some time later, SIGKILL; a person at the
terminal presses Ctrl-C (SIGINT). The handler installed here only records the first signal (and,
for Ctrl-C, says so on stderr); the loops ask :meth:`StopRequest.poll` at points
where stopping is clean (between training steps, between evaluation batches), and all ranks of a
distributed run agree through one small all-reduce, so one signalled rank is enough and every rank
stops at the same step. A second signal ends the process at once with :func:`exit_status`, unless
it comes within :data:`SAME_REQUEST_S` of the first: that is the same request passed on again
(torchrun's agent, given a Ctrl-C twice while it waits for its workers, follows its SIGINT with
SIGTERM within milliseconds; a wrapper that forwards signals to a child in the terminal's
process group doubles a Ctrl-C the same way). Before training has started (before the loop's
first :meth:`StopRequest.poll`) there is nothing to save: Ctrl-C then raises
:class:`InterruptedBeforeTraining` at once.

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
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

import torch

from . import dist
from .errors import ConfigError, LibaiError
from .suggest import did_you_mean

__all__ = ["DEFAULT_SIGNALS", "SAME_REQUEST_S", "STOP_SIGNALS", "InterruptedBeforeTraining",
           "StopRequest", "StopRequested", "Preempted", "exit_status", "parse_preemption"]

DEFAULT_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")
# Signals a job is commonly asked to stop with; SIGKILL and SIGSTOP cannot be caught.
STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGHUP", "SIGQUIT")
# A signal this soon after the first is the same request passed on again, not a person's second
# Ctrl-C: launchers relay within milliseconds, a person reads the Ctrl-C line first.
SAME_REQUEST_S = 1.0


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


class InterruptedBeforeTraining(KeyboardInterrupt):
    """Ctrl-C before the first training step (building the run, loading a checkpoint, starting
    the data loader): nothing was trained, so the run stops at once without saving. A
    KeyboardInterrupt, so code that catches Ctrl-C catches it; the tools print its message."""

    def __init__(self) -> None:
        super().__init__("interrupted before training started; nothing to save (Ctrl-C).")


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


_WAKEUP_FDS: set[int] = set()  # the wakeup fds this process's _Arrivals set


def _forget_wakeup_fd_in_child() -> None:
    """A forked child (a data loader worker) inherits the wakeup fd: the Ctrl-C that reaches the
    whole process group would be stamped once per worker. Give the child none of ours."""
    if not _WAKEUP_FDS:
        return
    try:
        previous = signal.set_wakeup_fd(-1)
        if previous not in _WAKEUP_FDS:
            signal.set_wakeup_fd(previous)  # not ours: leave it
    except ValueError:  # forked from another thread than the main one
        pass
    _WAKEUP_FDS.clear()


os.register_at_fork(after_in_child=_forget_wakeup_fd_in_child)


class _Arrivals:
    """When each signal reached the process. Python runs a handler in the main thread between
    bytecodes, so a handler can run long after its signal came: while the main thread waits in a
    collective (a rank finishing its step waits for the others) a relayed SIGTERM 10 ms after
    SIGINT would look a second late. The C-level handler writes the signal's number to the
    wakeup fd at once (``signal.set_wakeup_fd``); a thread stamps each byte as it comes. Where
    someone else holds the wakeup fd (an event loop), :meth:`at` has no stamps and the handler
    times the signal itself."""

    def __init__(self) -> None:
        self.stamps: list[tuple[int, float]] = []  # (signal number, time.monotonic), in order
        self._pair: tuple[socket.socket, socket.socket] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.stamps.clear()
        r, w = socket.socketpair()
        w.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            r.close(), w.close()
            return
        if previous != -1:  # another's (asyncio): give it back, time in the handler instead
            signal.set_wakeup_fd(previous)
            r.close(), w.close()
            return
        self._pair = (r, w)
        _WAKEUP_FDS.add(w.fileno())
        self._thread = threading.Thread(target=self._stamp, args=(r,), daemon=True,
                                        name="libai-signal-arrivals")
        self._thread.start()

    def _stamp(self, r: socket.socket) -> None:
        while True:
            try:
                data = r.recv(64)
            except OSError:
                return
            if not data:  # stop() shut it down
                return
            now = time.monotonic()
            self.stamps.extend((signum, now) for signum in data)

    def times(self, signums: tuple[int, ...]) -> list[float]:
        """The arrival times of ``signums`` stamped so far, in order."""
        return [t for signum, t in list(self.stamps) if signum in signums]

    def stop(self) -> None:
        if self._pair is None:
            return
        r, w = self._pair
        self._pair = None
        _WAKEUP_FDS.discard(w.fileno())
        try:
            if signal.set_wakeup_fd(-1) != w.fileno():  # replaced meanwhile: put it back
                signal.set_wakeup_fd(signal.set_wakeup_fd(-1))
        except ValueError:  # not the main thread: the process is ending anyway
            pass
        w.close()  # forked children (data loader workers) may hold it open too: so also
        try:       # shut the reading end down, which wakes the thread's recv at once
            r.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        r.close()


class StopRequest:
    """Records the first of ``signals``; :meth:`poll` reports it, agreed across ranks.

    Args:
        signals: Signal names, e.g. ``["SIGTERM", "SIGUSR1"]``. Defaults to :data:`DEFAULT_SIGNALS`.
    """

    def __init__(self, signals: Iterable[str] = DEFAULT_SIGNALS) -> None:
        self.signals = tuple(getattr(signal, name) for name in signals)
        self.received = 0  # the first signal's number; written only by the handler
        self._received_at = 0.0  # when it came (time.monotonic)
        self._training = False  # set by the first poll: the loop is at its first step
        self._previous: dict[int, Any] = {}
        self._owner = os.getpid()  # the process that installed the handlers
        self._announce = True  # rank 0 says what a Ctrl-C does
        self._group: Any = None
        self._distributed = False
        self._arrivals = _Arrivals()
        self._handled = 0
        self._settled = False  # the stop is saved: later signals are the job being ended

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
        self._handled = 0  # handler calls since install (several signals can make one)
        self._settled = False
        self._training = False
        self._owner = os.getpid()
        self._announce = dist.get_rank() == 0
        self._arrivals.start()
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
        self._arrivals.stop()

    def settle(self) -> None:
        """The stop is saved and the process is on its way out: a later signal is ignored
        until :meth:`uninstall`. A job that requeues itself (:mod:`libai.runner.slurm`) is sent
        SIGTERM by Slurm while rank 0 still writes its last line; exiting at once then would
        lose that line and claim that no checkpoint was written."""
        self._settled = True

    def _handle(self, signum: int, frame: Any) -> None:
        # Only a flag: the loops act on it where stopping is safe.
        if os.getpid() != self._owner or self._settled:
            # a forked child (a data loader worker, same terminal): the main process acts; a
            # settled stop (saved, the job being ended): nothing left to do
            return
        handled = time.monotonic()
        self._handled += 1
        came = self._arrivals.times(self.signals)  # may lag: the thread stamps when it runs
        if self.received:
            # this signal's arrival is the latest stamp once there are as many as handlers run
            now = came[-1] if len(came) >= self._handled else handled
            first = min(self._received_at, came[0]) if came else self._received_at
            if now - first < SAME_REQUEST_S:  # relayed again, not a second request
                if self._announce:
                    first_name = signal.Signals(self.received).name
                    name = signal.Signals(signum).name
                    os.write(2, f"libai: {name} {now - first:.2f} s after {first_name}: "
                                f"the same request passed on again (a launcher relaying it); "
                                f"still finishing this step and saving it.\n".encode())
                return
            name = signal.Signals(signum).name
            os.write(2, f"libai: second signal ({name}): exiting at once with status "
                        f"{exit_status(signum)}; no checkpoint of this step is written, the "
                        f"last complete one is kept.\n".encode())
            os._exit(exit_status(signum))
        if signum == signal.SIGINT and not self._training:
            raise InterruptedBeforeTraining  # nothing trained yet: stop at once, as Python would
        self.received, self._received_at = signum, came[0] if came else handled
        if signum == signal.SIGINT and self._announce:  # a person waits: say what happens
            os.write(2, b"libai: Ctrl-C: finishing this step and saving it, then stopping; press "
                        b"Ctrl-C again to exit at once without saving.\n")

    def poll(self) -> int:
        """The signal number if any rank received one, else 0. In a distributed run every rank
        must call it at the same point (one all-reduce of one number). The first call marks the
        start of training: from then on Ctrl-C finishes the step instead of stopping at once."""
        self._training = True
        if not self._distributed:
            return self.received
        flag = torch.tensor([self.received], dtype=torch.int64)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=self._group)
        return int(flag.item())
