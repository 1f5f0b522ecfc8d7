"""Graph mode's switch and its options: :func:`graph_options` (does the config ask for graph mode,
and with what) and :func:`compile_options` (``optim_wrapper.compile`` checked for torch.compile)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from libai.utils.errors import ConfigError, LibaiError
from libai.utils.suggest import did_you_mean

__all__ = ["COMPILE_KEYS", "GraphModeError", "compile_options", "graph_options"]

COMPILE_KEYS = tuple(p for p in inspect.signature(torch.compile).parameters if p != "model")
_POLICIES = ("eager", "raise")


class GraphModeError(LibaiError):
    """Graph mode could not compile the model, or its result differs from eager."""


def graph_options(cfg: Any) -> dict | None:
    """The :class:`GraphModule` arguments when ``cfg.optim_wrapper`` asks for graph mode (a
    GraphOptimWrapper, as a dict or built), else None: how the runner decides to wrap the model.

    Read from the config, not from a built wrapper: ``tools/test.py`` never builds the optimizer
    but evaluates compiled all the same.

    Raises:
        ConfigError: graph mode and the top-level ``compile`` both asked for.
    """
    from libai.registry import OPTIM_WRAPPERS

    # a GraphOptimWrapper (or a subclass) says so with its class attribute ``compiles_step``
    wrapper = cfg.get("optim_wrapper")
    if getattr(type(wrapper), "compiles_step", False):
        return dict(compile=wrapper.compile_options, on_failure=wrapper.on_failure)
    if not isinstance(wrapper, Mapping) or not isinstance(wrapper.get("type"), str):
        return None
    cls = OPTIM_WRAPPERS.get(wrapper["type"], path="optim_wrapper")
    if not (isinstance(cls, type) and getattr(cls, "compiles_step", False)):
        return None
    if cfg.get("compile"):
        raise ConfigError(
            "compile=... and optim_wrapper.type='GraphOptimWrapper' both ask for graph mode: "
            "remove compile and give its options as optim_wrapper.compile.")
    return dict(compile=compile_options(wrapper.get("compile"), wrapper.get("exact_random", True)),
                on_failure=wrapper.get("on_failure", "eager"))


def compile_options(cfg: dict | bool | None, exact_random: bool = True) -> dict[str, Any]:
    """Check ``optim_wrapper.compile`` and return the keyword arguments for ``torch.compile``.

    ``mode`` is turned into inductor ``options`` (``torch._inductor.list_mode_options``) so that
    ``exact_random`` (inductor's ``fallback_random``: random numbers drawn as eager draws them)
    can be added to any mode; torch.compile does not accept both ``mode`` and ``options``.

    Raises:
        ConfigError: an unknown key, with the closest valid one.
    """
    options = {} if cfg in (None, True) else cfg
    if not isinstance(options, dict):
        raise ConfigError(
            f"optim_wrapper.compile must be a dict of torch.compile arguments, e.g. "
            f"dict(mode='max-autotune', dynamic=False), got {cfg!r}."
        )
    options = dict(options)
    for key in options:
        if key not in COMPILE_KEYS:
            raise ConfigError(
                f"optim_wrapper.compile.{key} is not a torch.compile argument."
                f"{did_you_mean(str(key), COMPILE_KEYS)} Valid: {', '.join(COMPILE_KEYS)}."
            )
    backend = options.get("backend", "inductor")
    if backend == "inductor":
        mode = options.pop("mode", None)
        try:
            inductor = dict(torch._inductor.list_mode_options(mode)) if mode else {}
        except (KeyError, RuntimeError) as e:
            modes = [m for m in torch._inductor.list_mode_options() if m != "default"]
            raise ConfigError(
                f"optim_wrapper.compile.mode={mode!r} is not a torch.compile mode."
                f"{did_you_mean(str(mode), modes)} Valid: {', '.join(modes)}."
            ) from e
        if exact_random:
            inductor["fallback_random"] = True
        inductor.update(options.get("options") or {})
        if inductor:
            options["options"] = inductor
    return options



def check_policy(name: str, value: str) -> str:
    if value not in _POLICIES:
        raise ConfigError(
            f"optim_wrapper.{name}={value!r} is not a policy."
            f"{did_you_mean(str(value), _POLICIES)} Use 'eager' or 'raise'.")
    return value
