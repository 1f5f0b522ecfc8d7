"""Entry-point helper for command-line tools: short errors by default, tracebacks on request.

>>> def main(argv: list[str]) -> int | None: ...
>>> if __name__ == "__main__":
...     run_cli(main)

A :class:`~libai.utils.errors.LibaiError` (bad config, unknown registry name...) is printed as
one line, ``error: <message>``, and the process exits with status 2, because the message
already says what to fix. With ``--debug`` anywhere on the command line the error propagates
with its full traceback. Other exceptions are bugs and always show their traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from .errors import LibaiError

__all__ = ["EXIT_INTERRUPTED", "EXIT_USER_ERROR", "run_cli"]

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


def run_cli(
    main_fn: Callable[[list[str]], int | None],
    argv: Sequence[str] | None = None,
    teardown: Callable[[], None] | None = None,
) -> NoReturn:
    """Run ``main_fn(argv)`` and exit with its status.

    ``main_fn`` receives the arguments unchanged, ``--debug`` included, so its parser should
    declare ``--debug`` (``action="store_true"``) for ``--help`` to list it.

    Args:
        main_fn: The tool's main function; returns an exit status, or None for 0.
        argv: Command-line arguments without the program name. Defaults to None
            (``sys.argv[1:]``).
        teardown: Called last, also after an error, e.g. ``destroy_dist``. After a reported
            error it runs once the exception is released, so nothing ``main_fn`` built is
            still held by its traceback. Defaults to None.

    Raises:
        SystemExit: Always: the status of ``main_fn``, 2 after a ``LibaiError``, 130 after
            Ctrl-C.
        LibaiError: With ``--debug``, instead of the short message.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        status = _call(main_fn, args)
    finally:
        if teardown is not None:
            teardown()
    sys.exit(status)


def _call(main_fn: Callable[[list[str]], int | None], args: list[str]) -> int:
    """``main_fn(args)``'s exit status; a LibaiError or Ctrl-C is reported in one line."""
    try:
        return main_fn(args) or 0
    except LibaiError as e:
        if "--debug" in args:
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C). Checkpoints written so far are complete; continue a "
              "training run with --resume.", file=sys.stderr)
        return EXIT_INTERRUPTED
