"""Console and file logging shared by the runner, the hooks and the tools.

One :class:`rich.console.Console` (:func:`get_console`) serves the log lines and the progress bar,
so that a live bar and the lines printed above it never overwrite each other. ``rich`` is imported
on first use, not when this module is imported.

Who prints what:

- rank 0: every record at ``level`` or above goes to the console and, when a ``log_file`` is
  given, to that file as plain text with timestamps;
- ranks > 0: only warnings and errors reach the console, prefixed with ``[rank N]``; no file.

On a terminal the console lines are drawn by rich's ``RichHandler`` (time, level, message). When
stdout is not a terminal (a redirected file, a CI log, a notebook) they are plain
``time level message`` lines, so that long lines are not wrapped at 80 columns.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["get_console", "get_logger", "print_log", "stdout_is_terminal"]

_console: Console | None = None

# Marks the handlers this module adds, so that a second get_logger call finds and replaces them
# instead of stacking duplicates.
_ROLE = "_libai_role"
_FILE_FORMAT = "%(asctime)s - %(name)s - %(levelname)s - %(message)s"
_PLAIN_FORMAT = "%(asctime)s %(levelname)-7s %(message)s"
_TIME_FORMAT = "%H:%M:%S"


def get_console() -> Console:
    """Return the one console shared by log lines and progress bars (it writes to stdout)."""
    global _console
    if _console is None:
        from rich.console import Console

        _console = Console()
    return _console


class _StdoutHandler(logging.Handler):
    """Writes to whatever ``sys.stdout`` is at emit time (pytest and notebooks swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stdout.write(self.format(record) + "\n")
            sys.stdout.flush()
        except Exception:
            self.handleError(record)


def _stdout_may_be_terminal() -> bool:
    """False when stdout is surely not a terminal: rich (0.1 s to import) is then not needed.

    rich also treats stdout as a terminal when FORCE_COLOR or TTY_COMPATIBLE say so.
    """
    isatty = getattr(sys.stdout, "isatty", None)
    return bool(isatty and isatty()) or any(k in os.environ for k in ("FORCE_COLOR", "TTY_COMPATIBLE"))


def stdout_is_terminal() -> bool:
    """Whether the shared console draws for a terminal (live bars, colours); rich is imported
    only when stdout may be one."""
    if _console is not None:  # made already (or set by a caller): no import to save
        return _console.is_terminal
    return _stdout_may_be_terminal() and get_console().is_terminal


def _console_handler(rank: int) -> logging.Handler:
    prefix = f"[rank {rank}] " if rank > 0 else ""
    if stdout_is_terminal():
        console = get_console()
        from rich.logging import RichHandler

        handler: logging.Handler = RichHandler(
            console=console,
            show_path=False,
            markup=False,
            rich_tracebacks=False,
            log_time_format=f"[{_TIME_FORMAT}]",
        )
        handler.setFormatter(logging.Formatter(prefix + "%(message)s"))
    else:
        handler = _StdoutHandler()
        handler.setFormatter(logging.Formatter(prefix + _PLAIN_FORMAT, datefmt=_TIME_FORMAT))
    return handler


def _level(level: int | str) -> int:
    if isinstance(level, int):
        return level
    value = logging.getLevelName(str(level).upper())
    if not isinstance(value, int):
        raise ValueError(f"Unknown log level {level!r}; use DEBUG, INFO, WARNING or ERROR.")
    return value


def get_logger(
    name: str = "libai",
    log_file: str | None = None,
    level: int | str = "INFO",
    rank: int | None = None,
) -> logging.Logger:
    """Return the logger ``name`` with a console handler and, on rank 0, a file handler.

    Calling it again is safe: the handlers it added before are replaced, never duplicated. A new
    ``log_file`` replaces the previous one (one file per run).

    Args:
        name: Logger name. Defaults to "libai".
        log_file: Plain-text log file written by rank 0; its folder is created. Defaults to None
            (no file).
        level: Lowest level logged by rank 0. Defaults to "INFO".
        rank: This process's rank. Defaults to ``libai.utils.dist.get_rank()``.

    Returns:
        The configured :class:`logging.Logger`. It does not propagate to the root logger, so that
        an application's own root handlers do not print every line twice.
    """
    if rank is None:
        from libai.utils.dist import get_rank

        rank = get_rank()
    logger = logging.getLogger(name)
    logger.setLevel(_level(level))
    logger.propagate = False

    console = _find(logger, "console")
    if console is None or getattr(console, "_libai_rank", None) != rank:
        _remove(logger, console)
        console = _console_handler(rank)
        setattr(console, _ROLE, "console")
        console._libai_rank = rank  # type: ignore[attr-defined]
        logger.addHandler(console)
    console.setLevel(logging.NOTSET if rank == 0 else logging.WARNING)

    old_file = _find(logger, "file")
    if rank == 0 and log_file is not None:
        path = os.path.abspath(log_file)
        if old_file is None or getattr(old_file, "baseFilename", None) != path:
            _remove(logger, old_file)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fh = logging.FileHandler(path, mode="a", encoding="utf-8")
            fh.setFormatter(logging.Formatter(_FILE_FORMAT))
            setattr(fh, _ROLE, "file")
            logger.addHandler(fh)
    elif rank != 0:
        _remove(logger, old_file)
    return logger


def _find(logger: logging.Logger, role: str) -> logging.Handler | None:
    for h in logger.handlers:
        if getattr(h, _ROLE, None) == role:
            return h
    return None


def _remove(logger: logging.Logger, handler: logging.Handler | None) -> None:
    if handler is not None:
        logger.removeHandler(handler)
        handler.close()


def print_log(
    msg: Any, logger: logging.Logger | str | None = None, level: int | str = logging.INFO
) -> None:
    """Log ``msg`` through a logger, or drop it.

    Args:
        msg: The message.
        logger: A :class:`logging.Logger`, the name of one, "silent" (print nothing) or None (the
            "libai" logger, set up with :func:`get_logger` if it has no handlers yet). Defaults to
            None.
        level: Level of the record. Defaults to ``logging.INFO``.
    """
    if logger == "silent":
        return
    if isinstance(logger, logging.Logger):
        target = logger
    elif logger is None:
        target = logging.getLogger("libai")
        if not target.handlers:
            target = get_logger("libai")
    elif isinstance(logger, str):
        target = logging.getLogger(logger)
    else:
        raise TypeError(
            f"print_log: logger must be a Logger, a name, 'silent' or None, got {logger!r}"
        )
    target.log(_level(level), msg)
