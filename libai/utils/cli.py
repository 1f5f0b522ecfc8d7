"""Entry-point helper for command-line tools: short errors by default, tracebacks on request.

>>> def main(argv: list[str]) -> int | None: ...
>>> if __name__ == "__main__":
...     run_cli(main)

A :class:`~libai.utils.errors.LibaiError` (bad config, unknown registry name...) is printed as
one line, ``error: <message>``, and the process exits with status 2, because the message
already says what to fix. With ``--debug`` anywhere on the command line the error propagates
with its full traceback. So is an OS error a user causes and can fix (no permission, a file
where a folder is expected, a full disk, too many open files: :func:`os_error_line`). Other
exceptions are bugs and always show their traceback.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from .errors import LibaiError

__all__ = ["EXIT_BUG", "EXIT_INTERRUPTED", "EXIT_USER_ERROR", "os_error_line", "run_cli"]

EXIT_BUG = 1  # an exception that is no user's mistake: it propagates, with its traceback
EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


def run_cli(
    main_fn: Callable[[list[str]], int | None],
    argv: Sequence[str] | None = None,
    teardown: Callable[[int], None] | None = None,
) -> NoReturn:
    """Run ``main_fn(argv)`` and exit with its status.

    ``main_fn`` receives the arguments unchanged, ``--debug`` included, so its parser should
    declare ``--debug`` (``action="store_true"``) for ``--help`` to list it.

    Args:
        main_fn: The tool's main function; returns an exit status, or None for 0.
        argv: Command-line arguments without the program name. Defaults to None
            (``sys.argv[1:]``).
        teardown: Called last with the exit status, also after an error, e.g.
            ``destroy_dist`` (which waits for the other ranks only after a success: after an
            error a peer may be waiting for this rank, and torchrun stops it once this one
            exits). It runs once the exception is released, so nothing ``main_fn`` built is
            still held by its traceback. Defaults to None.

    Raises:
        SystemExit: Always: the status of ``main_fn``, 2 after a ``LibaiError``, 130 after
            Ctrl-C, a ``LibaiError``'s own ``exit_status`` where it has one (``Preempted``:
            128 + the signal's number, no message: the runner logged it).
        LibaiError: With ``--debug``, instead of the short message; any other exception, with
            its traceback (a bug).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        status = _call(main_fn, args)
    except BaseException as e:  # a bug (or --debug): the teardown must not wait for the other
        if teardown is not None and not isinstance(e, SystemExit):  # ranks, one of which may
            teardown(EXIT_BUG)  # be waiting for this one; then the traceback
        raise
    if teardown is not None:
        teardown(status)
    sys.exit(status)


def _call(main_fn: Callable[[list[str]], int | None], args: list[str]) -> int:
    """``main_fn(args)``'s exit status; a LibaiError or Ctrl-C is reported in one line."""
    try:
        return main_fn(args) or 0
    except LibaiError as e:
        status = getattr(e, "exit_status", None)
        if status is not None:  # an orderly stop (Preempted: a signal), logged where it happened
            return int(status)
        if "--debug" in args:
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as e:
        line = os_error_line(e)
        if line is None or "--debug" in args:  # not one a user causes: a bug, keep the traceback
            raise
        print(f"error: {line}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as e:
        # a message of its own (signals.InterruptedBeforeTraining) knows where the run was
        print(str(e) or "interrupted (Ctrl-C). Checkpoints written so far are complete; "
              "continue a training run with --resume.", file=sys.stderr)
        return EXIT_INTERRUPTED


# OS errors a user causes (and can fix), with the fix; any other OSError keeps its traceback.
_OS_FIXES = {
    errno.EACCES: "make it accessible (chmod) or choose another path",
    errno.EPERM: "make it accessible (chmod) or choose another path",
    errno.EROFS: "choose a path on a writable file system",
    errno.ENOSPC: "free disk space or choose a path on another disk",
    errno.EDQUOT: "free space within your quota or choose a path on another disk",
    errno.ENOTDIR: "a part of the path is a file, not a folder: choose another path",
    errno.EISDIR: "it is a folder: give a file name",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.EMFILE: "raise the limit of open files (ulimit -n 65536) or lower num_workers",
    errno.ENFILE: "raise the system's limit of open files or lower num_workers",
}


def os_error_line(e: OSError) -> str | None:
    """One line for an OS error a user can fix (permissions, a file where a folder is expected,
    a full disk, too many open files): the cause, the path and the fix; None for any other."""
    fix = _OS_FIXES.get(e.errno)
    if fix is None:
        return None
    where = f" '{e.filename}'" if e.filename else ""
    also = f" -> '{e.filename2}'" if getattr(e, "filename2", None) else ""
    return f"{e.strerror or e}:{where}{also}. Fix: {fix}."
