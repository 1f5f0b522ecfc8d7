"""The report of a model weight load: what matched, what is missing, unexpected or misshapen."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["LoadReport", "group_keys", "suggest_remap"]

Shape = tuple[int, ...]


def group_keys(keys: Iterable[str], max_lines: int = 12) -> list[str]:
    """Summarise parameter names as a few readable lines, grouped by prefix.

    Keys under a numbered container collapse at the first index: ``encoder.layers.0.fc.weight`` ...
    ``encoder.layers.23.fc.bias`` become ``encoder.layers.* (48 keys; indices 0-23)``
    (``encoder.layers.5.*`` when only one index occurs). Other keys group by their parent module (``head.* (2 keys)``). A
    group of one shows the key itself. When there are more than ``max_lines`` groups they merge by
    first name component, and the rest is cut with a count.

    Args:
        keys: Parameter names, in the order to show them.
        max_lines: Most lines returned. Defaults to 12.

    Returns:
        One string per group, e.g. ``"encoder.layers.* (48 keys; indices 0-23)"``.
    """
    keys = list(keys)
    lines = _group(keys, _stem)
    if len(lines) > max_lines:
        lines = _group(keys, lambda k: (k.split(".", 1)[0], None) if "." in k else (k, None))
    if len(lines) > max_lines:
        rest = len(lines) - (max_lines - 1)
        lines = lines[: max_lines - 1] + [f"... and {rest} more groups"]
    return lines


def _stem(key: str) -> tuple[str, str | None]:
    """(group stem, index value or None) for one key."""
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        if part.isdigit():
            return ".".join(parts[:i]), part
    return ".".join(parts[:-1]) if len(parts) > 1 else key, None


def _group(keys: list[str], stem_of) -> list[str]:
    members: dict[tuple[str, bool], list[str]] = {}
    indices: dict[tuple[str, bool], set[str]] = {}
    for key in keys:
        stem, index = stem_of(key)
        slot = (stem, index is not None)
        members.setdefault(slot, []).append(key)
        if index is not None:
            indices.setdefault(slot, set()).add(index)
    lines = []
    for (stem, indexed), group in members.items():
        if len(group) == 1:
            lines.append(group[0])
            continue
        count = f"{len(group)} keys"
        tail = "*"
        if indexed:
            values = indices[(stem, indexed)]
            if len(values) == 1:
                tail = next(iter(values)) + ".*"
            else:
                count += f"; indices {_ranges(int(v) for v in values)}"
        label = f"{stem}.{tail}" if stem else tail
        lines.append(f"{label} ({count})")
    return lines


def _ranges(values: Iterable[int], max_runs: int = 6) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2, 5, 7-8"``."""
    runs: list[list[int]] = []
    for v in sorted(values):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    text = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:max_runs]]
    return ", ".join(text) + (", ..." if len(runs) > max_runs else "")


def suggest_remap(missing: list[str], unexpected: list[str]) -> dict[str, str] | None:
    """Guess a prefix rename that would turn unexpected checkpoint keys into missing model keys.

    For example checkpoint ``backbone.layer1.weight`` vs model ``encoder.layer1.weight`` gives
    ``{"backbone.": "encoder."}``. Returns None unless the best rename matches at least two keys
    (or all of them when there is only one).
    """
    if not missing or not unexpected:
        return None
    by_suffix: dict[str, list[str]] = {}
    for key in missing:
        parts = key.split(".")
        for i in range(len(parts)):
            by_suffix.setdefault(".".join(parts[i:]), []).append(".".join(parts[:i]))
    votes: Counter[tuple[str, str]] = Counter()
    for key in unexpected:
        parts = key.split(".")
        # The longest shared tail decides; the leaf name alone ("weight") is too weak to count.
        for i in range(len(parts) - 1):
            prefixes = by_suffix.get(".".join(parts[i:]))
            if prefixes:
                for m_prefix in set(prefixes):
                    u_prefix = ".".join(parts[:i])
                    votes[
                        (u_prefix + "." if u_prefix else "", m_prefix + "." if m_prefix else "")
                    ] += 1
                break
    if not votes:
        return None
    (old, new), count = votes.most_common(1)[0]
    if old == new or count < min(2, len(unexpected)):
        return None
    return {old: new}


@dataclass
class LoadReport:
    """What :func:`~libai.checkpoint.load_model_state` did; ``str(report)`` reads well in a log.

    Attributes:
        loaded: Model keys that received checkpoint values.
        missing: Model keys the checkpoint lacks (left as initialised).
        unexpected: Checkpoint keys (after prefix stripping and remap) the model lacks.
        shape_mismatches: ``(key, checkpoint shape, model shape)`` for keys not loaded because the
            shapes differ.
        stripped_prefixes: Wrapper prefixes removed from checkpoint keys (``module.``,
            ``_orig_mod.``).
        renamed: Number of checkpoint keys changed by ``remap``.
    """

    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    shape_mismatches: list[tuple[str, Shape, Shape]] = field(default_factory=list)
    stripped_prefixes: list[str] = field(default_factory=list)
    renamed: int = 0

    @property
    def ok(self) -> bool:
        """True when every model key was loaded and the checkpoint had nothing else."""
        return not (self.missing or self.unexpected or self.shape_mismatches)

    @property
    def remap_hint(self) -> dict[str, str] | None:
        """A prefix rename that looks like it would fix missing/unexpected pairs, if any."""
        return suggest_remap(self.missing, self.unexpected)

    def __str__(self) -> str:
        total = len(self.loaded) + len(self.missing) + len(self.shape_mismatches)
        if self.ok:
            lines = [f"Loaded all {total} model entries from the checkpoint."]
        else:
            lines = [f"Loaded {len(self.loaded)} of {total} model entries from the checkpoint."]
        if self.stripped_prefixes:
            lines.append(f"Stripped wrapper prefixes: {', '.join(self.stripped_prefixes)}")
        if self.renamed:
            lines.append(f"Renamed {self.renamed} checkpoint keys with remap.")
        if self.missing:
            lines.append(f"Missing in the checkpoint ({len(self.missing)}; left as initialised):")
            lines += [f"  {line}" for line in group_keys(self.missing)]
        if self.unexpected:
            lines.append(f"Unexpected in the checkpoint ({len(self.unexpected)}; ignored):")
            lines += [f"  {line}" for line in group_keys(self.unexpected)]
        if self.shape_mismatches:
            lines.append(f"Shape mismatch ({len(self.shape_mismatches)}; not loaded):")
            shown = self.shape_mismatches[:20]
            lines += [f"  {k}: checkpoint {_fmt(c)} vs model {_fmt(m)}" for k, c, m in shown]
            if len(self.shape_mismatches) > len(shown):
                lines.append(f"  ... and {len(self.shape_mismatches) - len(shown)} more")
        return "\n".join(lines)


def _fmt(shape: Shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
