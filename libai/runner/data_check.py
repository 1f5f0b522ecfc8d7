"""Before the model is built: the data files of every split, and a classifier's class count.

A dataset class may say how to check its files without building itself (``check_files(**its
arguments)``, returning ``{"classes", "task"}``: :class:`~libai.data.text.LabeledTextDataset`
has it). The runner calls it for the train, val and test sets before it builds the model, so a
bad val or test file stops the run at second one, as a bad train file does, instead of after
the model (minutes for a large one) or after the first training interval.

The label map it returns gives the model its class count: ``model.num_classes=None`` (the
fine-tuning configs' default) is the number of labels (1 for regression); an explicit value that
disagrees is refused here, before anything is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from libai.registry import DATASETS
from libai.registry.diagnose import explain_failure
from libai.utils.errors import ConfigError, LibaiError

__all__ = ["check_data_files", "model_with_classes"]

SECTIONS = ("train_dataloader", "val_dataloader", "test_dataloader")


def _dataset_cfgs(cfg: Any) -> list[tuple[str, Any]]:
    """``(config path, dataset)`` of every split: a dict with a type, or a built dataset (a dict
    of named sets included)."""
    out = []
    for section in SECTIONS:
        loader = cfg.get(section)
        if not isinstance(loader, Mapping):
            continue
        sets = {section: loader} if "dataset" in loader else {
            f"{section}.{name}": one for name, one in loader.items()
            if isinstance(one, Mapping) and "dataset" in one}
        for where, one in sets.items():
            dataset = one.get("dataset")
            if not isinstance(dataset, Mapping) or isinstance(dataset.get("type"), str):
                out.append((f"{where}.dataset", dataset))
    return out


def check_data_files(cfg: Any) -> dict[str, Any] | None:
    """Check the files of every split whose dataset class has ``check_files``; a dataset given
    built is read from its ``metainfo``.

    Returns:
        The first split's ``{"classes", "task", "section"}``, or None when no dataset says.

    Raises:
        BuildError: A file that building the dataset would refuse, named as building it would.
    """
    found = None
    for where, dataset in _dataset_cfgs(cfg):
        if not isinstance(dataset, Mapping):  # built: its metainfo says (LabeledTextDataset's)
            meta = getattr(dataset, "metainfo", None)
            if found is None and isinstance(meta, Mapping) and "task" in meta:
                found = {"classes": meta.get("classes"), "task": meta["task"], "section": where}
            continue
        cls = DATASETS.get(dataset["type"], path=where)
        check = getattr(cls, "check_files", None)  # optional: a dataset may offer it
        if check is None:
            continue
        args = {k: v for k, v in dataset.items() if k != "type"}
        try:
            meta = check(**args)
        except LibaiError as e:
            raise (explain_failure(e, cls, args, where) or e) from e
        if found is None and isinstance(meta, Mapping) and "task" in meta:
            found = {**meta, "section": where}
    return found


def model_with_classes(model_cfg: Any, meta: Mapping[str, Any] | None) -> Any:
    """``model_cfg`` with ``num_classes`` from the label map when it is None; an explicit value
    that disagrees with the label map is refused. The config itself is left as written.

    Raises:
        ConfigError: ``num_classes`` disagrees with the labels, or is None with no label map.
    """
    if not isinstance(model_cfg, Mapping) or "num_classes" not in model_cfg:
        return model_cfg
    given = model_cfg["num_classes"]
    if meta is None:
        if given is None:
            raise ConfigError("model.num_classes=None takes the class count from the data, but "
                              "no dataset of the config says its labels: set model.num_classes.")
        return model_cfg
    classes = meta.get("classes") or ()
    want = 1 if meta["task"] == "regression" else len(classes)
    if given is None:
        return {**model_cfg, "num_classes": want}
    if isinstance(given, int) and not isinstance(given, bool) and given != want and want:
        named = f" ({', '.join(classes)})" if classes and len(classes) <= 12 else ""
        what = ("output (task='regression')" if meta["task"] == "regression"
                else f"labels{named}")
        raise ConfigError(f"model.num_classes={given} but {meta['section']} has {want} {what}: "
                          f"set model.num_classes={want}, or None to take it from the data.")
    return model_cfg
