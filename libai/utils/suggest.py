"""Did-you-mean suggestions for error messages, and the one-line message for an unknown name
(a config key, an option, a choice) built on them."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable
from typing import Any

from .errors import ConfigError

__all__ = ["closest", "did_you_mean", "refuse_unknown", "unknown"]


def closest(name: str, candidates: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Return up to ``n`` candidates closest to ``name``, best first.

    Matching is case-insensitive; a candidate that contains ``name`` (or is contained in it)
    counts as close even when the edit ratio is low, so ``lr`` suggests ``base_lr``.
    """
    cands = [str(c) for c in candidates]
    lowered = {c.lower(): c for c in cands}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=cutoff)
    out = [lowered[h] for h in hits]
    if len(out) < n and len(name) >= 2:
        for c in cands:
            if c not in out and (name.lower() in c.lower() or c.lower() in name.lower()):
                out.append(c)
                if len(out) == n:
                    break
    return out


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> str:
    """A sentence fragment like ``" Did you mean 'foo' or 'fob'?"``, or ``""`` if none is close."""
    hits = closest(name, candidates, n=n)
    if not hits:
        return ""
    quoted = [f"'{h}'" for h in hits]
    if len(quoted) == 1:
        return f" Did you mean {quoted[0]}?"
    return f" Did you mean {', '.join(quoted[:-1])} or {quoted[-1]}?"


def unknown(problem: str, name: Any, valid: Iterable[Any], listed: str = "Valid keys:") -> str:
    """The one-line message for a name that is not among ``valid``: the problem, the closest
    valid names, then all of them, e.g. ``"custom_imports has an unknown key 'import_'. Did you
    mean 'imports'? Valid keys: imports, allow_failed_imports."``.

    Args:
        problem: What is wrong, without the final full stop.
        name: The name given.
        valid: The names accepted, in the order to list them.
        listed: What introduces the list. Defaults to "Valid keys:".
    """
    names = [str(v) for v in valid]
    return f"{problem}.{did_you_mean(str(name), names)} {listed} {', '.join(names)}."


def refuse_unknown(
    given: Iterable[Any],
    valid: Collection[Any],
    problem: Callable[[Any], str],
    listed: str = "Valid keys:",
    error: type[Exception] = ConfigError,
) -> None:
    """Raise ``error`` with :func:`unknown`'s message for the first of ``given`` (the keys of a
    config dict, say) that is not in ``valid``; ``problem(key)`` says what is wrong with it."""
    for key in given:
        if key not in valid:
            raise error(unknown(problem(key), key, valid, listed))
