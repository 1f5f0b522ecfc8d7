"""Did-you-mean suggestions for error messages."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "did_you_mean"]


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
