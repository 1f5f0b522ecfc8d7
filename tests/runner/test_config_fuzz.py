"""Every leaf key of every shipped config, given a value of the wrong kind, either trains or stops
with libai's one-line error naming that key; never another exception (issue 17).

The shipped configs are found by globbing ``configs/*.py``, so a new config is covered when it
lands. A key is tried once, in the cheapest config that has it (``val_dataloader.*`` and
``test_dataloader.*`` count as ``train_dataloader.*``: the same code builds them); a key only a big
config has is moved into the cheapest config whose enclosing part has the same ``type``, so that
no test builds a 300 M parameter model. Each case builds a Runner and runs one training
iteration and one evaluation batch (``fast_dev_run=1``), then one test batch.

A config's datasets are built once per test and shared by its cases (shared_data): the text
datasets read and tokenise the whole built-in corpus when built (seconds each), and a case
whose key is outside a dataset builds the same dataset from the same dict. A case whose key is
inside one (``*.dataset.*``) builds it anew, wrong value and all.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gc
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from libai.config import Config
from libai.data.text import instruction
from libai.registry import DATASETS
from libai.runner import Runner
from libai.runner.build import build_model
from libai.utils.errors import LibaiError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.py"))  # _base_/ and sweeps/ are folders

WRONG = (("a string", "zz_bad"), ("a negative number", -3), ("None", None),
         ("an empty list", []), ("a dict", {"zz_bad": 1}))
# Keys that name where things go, not what is computed: the test sets them itself.
SKIP = {"work_dir"}
# Sizes shrunk in every config so that one case costs a fraction of a second.
SHRINK = {"train_cfg.max_iters": 4}
for _loader in ("train_dataloader", "val_dataloader", "test_dataloader"):
    SHRINK.update({f"{_loader}.batch_size": 2, f"{_loader}.dataset.max_seq_length": 32,
                   f"{_loader}.dataset.seq_length": 32})


def leaves(node: Any, path: str = ""):
    """(dotted path, value) of every leaf; lists of dicts are walked with their indices."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            if not str(key).startswith("_"):
                yield from leaves(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list) and any(isinstance(v, dict) for v in node):
        for i, value in enumerate(node):
            yield from leaves(value, f"{path}.{i}")
    else:
        yield path, node


def _walk(node: Any, parts: list[str]) -> Any:
    for part in parts:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _set(tree: dict, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    parent = _walk(tree, parents)
    parent[int(last) if isinstance(parent, list) else last] = value


def _owner_type(tree: dict, path: str) -> tuple[str, Any]:
    """The nearest dict above ``path`` that has a 'type': its path and its type."""
    parts = path.split(".")[:-1]
    while parts:
        node = _walk(tree, parts)
        if isinstance(node, dict) and "type" in node:
            return ".".join(parts), node["type"]
        parts.pop()
    return "", None


def _family(path: str) -> str:
    return re.sub(r"^(val|test)_(dataloader|evaluator|cfg)", r"train_\2", path)


def _cost(tree: dict) -> int:
    """A stand-in for the cost of a run: the sum of the model's integer settings."""
    return sum(v for _, v in leaves(tree.get("model") or {}) if isinstance(v, int))


def _dataset_type(tree: dict, key: str) -> Any:
    loader = tree.get(key.split(".")[0])
    return (loader.get("dataset") or {}).get("type") if isinstance(loader, dict) else None


def _load(path: Path) -> dict:
    tree = Config.fromfile(path).to_dict()
    for key, value in SHRINK.items():
        if key.endswith("max_seq_length") and _dataset_type(tree, key) == "InstructionDataset":
            continue  # the built-in questions need about 100 tokens to reach their answers
        try:
            if _walk(tree, key.split(".")) is not None:
                _set(tree, key, value)
        except (KeyError, IndexError, TypeError):
            pass  # a config without this key
    return tree


def plan() -> list[tuple[str, dict, str]]:
    """(config name, base tree, key path) for every key family, cheapest config first."""
    trees = sorted(((p.stem, _load(p)) for p in CONFIGS), key=lambda t: _cost(t[1]))
    seen: set[str] = set()
    cases = []
    for name, tree in trees:
        for path, _ in leaves(tree):
            if path in SKIP or _family(path) in seen:
                continue
            seen.add(_family(path))
            cases.append(_cheapest_home(trees, name, tree, path))
    return cases


def _cheapest_home(trees: list, name: str, tree: dict, path: str) -> tuple[str, dict, str]:
    """Move ``path`` into a cheaper config whose enclosing part has the same type, if any."""
    owner, kind = _owner_type(tree, path)
    for other_name, other in trees:
        if other_name == name:
            break
        try:
            if owner and _walk(other, owner.split(".")).get("type") == kind:
                moved = copy.deepcopy(other)
                _set(moved, path, _walk(tree, path.split(".")))
                return f"{other_name}+{name}", moved, path
        except (KeyError, IndexError, TypeError, AttributeError):
            continue
    return name, tree, path


def names_key(message: str, path: str) -> bool:
    """The message names ``path``: in full, or its last key as a word with its part's name."""
    message = re.sub(r"\[(\d+)\]", r".\1", message)
    parts = path.split(".")
    if path in message:
        return True
    words = [p for p in parts if not p.isdigit()]
    leaf, section = words[-1], words[0]
    if leaf == "type":  # too common a word: the part must be named
        return ".".join(parts[:-1]) in message or (
            f"{words[-2]}.type" in message and section in message)
    word = re.escape(leaf)
    return re.search(rf"\b{word}\b", message) is not None and (
        len(words) == 1 or section in message or words[-2] in message
        or re.search(rf"\w+\.{word}\b|\b{word}=", message) is not None)


PRETRAINED: dict[str, str] = {}


def _pretrained(load_from: str, work_dir: Path) -> str:
    """A stand-in for the checkpoint a fine-tuning config loads (``work_dirs/bert_tiny/...``):
    the initial weights of the config that writes it, saved once per test process."""
    if load_from not in PRETRAINED:
        source = ROOT / "configs" / f"{Path(load_from).parent.name}.py"
        model = build_model(Config.fromfile(source)["model"])
        path = work_dir.parent / f"pretrained-{source.stem}.pth"
        torch.save({"state_dict": model.state_dict()}, path)
        PRETRAINED[load_from] = str(path)
    return PRETRAINED[load_from]


BUILT: dict[str, Any] = {}


@contextlib.contextmanager
def shared_data():
    """DATASETS.build returns the dataset it built before from an equal dict (and arguments),
    and the built-in instruction set is read once per split (it is parsed from the plays before
    the tokenizer is looked at: a case with a wrong tokenizer would read it again). A build that
    fails is not kept, so it fails again the next time."""
    build, read = DATASETS.build, instruction.shakespeare_instructions

    def once(make: Any, *args: Any, **kwargs: Any) -> Any:
        key = repr((make.__qualname__, args, sorted(kwargs.items())))
        if key not in BUILT:
            BUILT[key] = make(*args, **kwargs)
        return BUILT[key]

    DATASETS.build = functools.partial(once, build)
    instruction.shakespeare_instructions = functools.partial(once, read)
    try:
        yield
    finally:
        del DATASETS.build  # the instance attribute: the class's method again
        instruction.shakespeare_instructions = read


def run_case(tree: dict, path: str, value: Any, work_dir: Path) -> str | None:
    """None when the run trained or stopped with a one-line error naming ``path``; else why not."""
    cfg = copy.deepcopy(tree)
    load_from = cfg.get("load_from")
    if load_from and not path.startswith("load_from"):  # the wrong value is the thing looked at
        if isinstance(load_from, dict):
            cfg["load_from"] = {**load_from, "path": _pretrained(load_from["path"], work_dir)}
        else:
            cfg["load_from"] = _pretrained(load_from, work_dir)
    elif load_from and path != "load_from.path":
        cfg["load_from"]["path"] = _pretrained(load_from["path"], work_dir)
    _set(cfg, path, value)
    cfg["work_dir"] = str(work_dir)
    # the model table and FLOP count of the first step, the plots (drawn by a process of their
    # own) and TensorBoard cost more than the rest of the run; no shipped config sets these
    hooks = dict(cfg.get("default_hooks") or {})
    logger = hooks.get("logger")
    if isinstance(logger, dict):
        hooks["logger"] = {"plot": False, "backends": [dict(type="JsonlBackend")], **logger}
    cfg["default_hooks"] = {**hooks, "throughput": None}
    try:
        with shared_data():
            runner = Runner.from_cfg(Config(cfg), fast_dev_run=1)
            runner.train()
            if runner.test_loop is not None:
                runner.test()
        return None
    except LibaiError as e:
        return None if names_key(str(e), path) else f"does not name the key: {e}"
    except Exception as e:  # noqa: BLE001 - what the test looks for
        return f"{type(e).__name__}: {e}"
    finally:
        logger = logging.getLogger("libai")
        for handler in [h for h in logger.handlers if isinstance(h, logging.FileHandler)]:
            logger.removeHandler(handler)
            handler.close()




CASES = plan()
HOMES = sorted({c[0] for c in CASES})
TRIED: list[int] = []


def _trains_digits(home: str) -> bool:
    """``home`` is the config that trains, or "cheaper+original" for a key moved into it."""
    return home.split("+")[0].startswith("digits")


@pytest.mark.parametrize("home", [h for h in HOMES if _trains_digits(h)])
def test_wrong_kind_of_value_trains_or_names_the_key(home, tmp_path):
    check_every_case(home, tmp_path)


@pytest.mark.usefixtures("shipped_config")  # slow: the trees are the shipped configs, loaded above
@pytest.mark.parametrize("home", [h for h in HOMES if not _trains_digits(h)])
def test_wrong_kind_of_value_trains_or_names_the_key_of_a_text_config(home, tmp_path):
    check_every_case(home, tmp_path)


def check_every_case(home: str, tmp_path: Path) -> None:
    cases = [c for c in CASES if c[0] == home]
    cheapest = home == CASES[0][0]
    failures = []
    try:
        for i, (_, tree, path) in enumerate(cases):
            # every kind for the cheapest config; two per key, in turn, for the others
            kinds = WRONG if cheapest else [WRONG[(i + j) % len(WRONG)] for j in (0, 2)]
            for label, value in kinds:
                problem = run_case(tree, path, copy.deepcopy(value), tmp_path / f"{i}")
                TRIED.append(1)
                if problem is not None:
                    failures.append(f"{path} = {label} ({value!r}): "
                                    f"{problem.splitlines()[0][:300]}")
            # the runners just built are cycles: free them, then set aside what is still alive
            # (torch and dynamo's millions of objects), so that the next collection looks at
            # the next key's objects only (a full one takes 0.1-0.3 s)
            gc.collect()
            gc.freeze()
    finally:
        gc.unfreeze()
        BUILT.clear()  # this config's datasets: the next test may be another config's
    assert not failures, f"{home}: {len(failures)} case(s)\n" + "\n".join(failures)


def test_plan_covers_every_shipped_config_and_key():
    names = {c[0].split("+")[-1] for c in CASES}
    assert {p.stem for p in CONFIGS} >= names and "digits_mlp" in names
    digits = [c for c in CASES if c[0] == "digits_mlp"]
    assert {"model.hidden", "optim_wrapper.optimizer.lr", "train_cfg.max_iters"} <= {
        c[2] for c in digits}
    assert len(CASES) == len({_family(c[2]) for c in CASES})


def test_names_key():
    assert names_key("optim_wrapper.optimizer.lr='x': expected a number",
                     "optim_wrapper.optimizer.lr")
    assert names_key("param_scheduler[0].type='x' is not registered", "param_scheduler.0.type")
    assert not names_key("Building 'optim_wrapper' failed: TypeError: unhashable type",
                         "optim_wrapper.clip_grad.type")
    assert names_key("LinearLR.start_factor must be a number >= 0",
                     "param_scheduler.0.start_factor")
