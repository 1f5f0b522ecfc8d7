"""Check output paths before any work is done: a run must not train for an hour and then find
that it cannot write its log, its checkpoint or its predictions.

``check_output_path("work_dirs/run", "work_dir", folder=True)`` passes when the folder exists
and is writable, or can be created; ``check_output_path("/etc/passwd/x.pt", "--dump")`` raises a
ConfigError saying that '/etc/passwd' is a file.

Nothing is created: the nearest existing folder on the way is checked for write permission.
"""

from __future__ import annotations

import os

from .errors import ConfigError

__all__ = ["check_output_path"]


def check_output_path(path: str | os.PathLike, key: str, folder: bool = False) -> str:
    """Refuse an output path that cannot be written, naming the config key and the fix.

    Args:
        path: Where something will be written: a folder (``folder=True``) or a file.
        key: The config key or flag that set it (``work_dir``, ``--dump``), for the message.
        folder: True when ``path`` itself is a folder to write into. Defaults to False.

    Returns:
        The absolute path.

    Raises:
        ConfigError: ``path`` is not a string, names a file where a folder is expected (or a
            folder where a file is expected), lies below a file, or its nearest existing folder
            is not writable.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ConfigError(f"{key}={path!r}: expected a path (a non-empty string).")
    full = os.path.abspath(os.fspath(path))
    if folder and os.path.exists(full) and not os.path.isdir(full):
        raise ConfigError(f"{key}={os.fspath(path)!r} is a file, not a folder: choose another "
                          f"{key}, or move the file away.")
    if not folder and os.path.isdir(full):
        raise ConfigError(f"{key}={os.fspath(path)!r} is a folder: give a file name inside it.")
    probe = full if folder else os.path.dirname(full)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise ConfigError(f"{key}={os.fspath(path)!r}: '{probe}' is a file, not a folder, so "
                          f"nothing can be written below it. Choose another path.")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{key}={os.fspath(path)!r}: no permission to write in '{probe}'. "
                          f"Make it writable (chmod u+w) or choose a folder you can write to.")
    return full
