"""Graph mode's switch and its options: :func:`graph_options` (does the config ask for graph mode,
and with what) and :func:`compile_options` (``optim_wrapper.compile`` checked for torch.compile)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch

from libai.utils.errors import ConfigError, LibaiError
from libai.utils.suggest import did_you_mean

__all__ = ["COMPILE_KEYS", "GRAPH_KEYS", "GraphModeError", "compile_options", "compile_regions",
           "graph_options", "wrapper_switch"]

COMPILE_KEYS = tuple(p for p in inspect.signature(torch.compile).parameters if p != "model")
# what graph mode adds to torch.compile's arguments (GraphOptimWrapper's arguments of the same
# names say what each does)
GRAPH_KEYS = ("on_failure", "verify_steps", "verify_rtol", "on_mismatch", "exact_random", "regions")
_POLICIES = ("eager", "raise")


class GraphModeError(LibaiError):
    """Graph mode could not compile the model, or its result differs from eager."""


def graph_options(cfg: Any) -> dict | None:
    """The compile switch: the :class:`GraphModule` and parity-check arguments when the config
    asks for graph mode, else None. Preparing the model (``libai.runner.distribute``) reads it
    once; nothing else decides whether a run is compiled.

    Two spellings ask for it, and mean the same: ``compile=True`` or ``compile=dict(...)``
    (``torch.compile`` arguments plus the graph-mode keys of :data:`GRAPH_KEYS`;
    ``tools/train.py --graph`` sets ``compile=True``), and ``optim_wrapper.type=
    'GraphOptimWrapper'``, whose ``compile``, ``on_failure``, ``verify_steps``... become those
    of ``compile=...``. Read from the config, not from a built wrapper: ``tools/test.py`` never
    builds the optimizer but evaluates compiled all the same.

    Returns:
        ``dict(compile=<torch.compile kwargs>, on_failure=..., exact_random=...)`` with the
        parity-check keys given (``verify_steps``, ``verify_rtol``, ``on_mismatch``), or None.

    Raises:
        ConfigError: both spellings at once, or an unknown option.
    """
    wrapper = cfg.get("optim_wrapper")
    switch, path = wrapper_switch(wrapper), "optim_wrapper"
    if switch is not None and cfg.get("compile"):
        raise ConfigError(
            "compile=... and optim_wrapper.type='GraphOptimWrapper' both ask for graph mode: "
            "remove compile and give its options as optim_wrapper.compile.")
    if switch is None:
        value = cfg.get("compile")
        if not value:
            return None
        if not isinstance(value, Mapping) and value is not True:
            raise ConfigError(f"compile={value!r}: expected True, False or a dict of "
                              f"torch.compile arguments such as dict(mode='max-autotune').")
        options = {} if value is True else dict(value)
        switch = {k: options.pop(k) for k in GRAPH_KEYS if k in options}
        switch.pop("regions", None)  # how the model is compiled: compile_regions reads it
        switch["compile"], path = options, "compile"
    exact = switch.pop("exact_random", True)
    out = dict(compile=compile_options(switch.pop("compile", None), exact, path),
               on_failure=check_policy("on_failure", switch.get("on_failure", "eager")),
               exact_random=exact)
    out.update({k: v for k, v in switch.items() if k != "on_failure"})
    return out


def compile_regions(cfg: Any) -> bool:
    """``compile.regions``: compile the model's repeated blocks (``parallel_blocks``, or
    ``parallel.blocks``) once each class and reuse the code for every block, the rest of the model
    and its loss running eager (True, the default: torch's regional compilation, a cold compile
    the size of one block); or the whole model with its loss in one graph (False). A model with
    no blocks compiles whole either way, and a sharded one block by block.

    Raises:
        ConfigError: a value that is not a bool.
    """
    value = cfg.get("compile")
    regions = value.get("regions", True) if isinstance(value, Mapping) else True
    if not isinstance(regions, bool):
        raise ConfigError(f"compile.regions={regions!r}: expected True (compile each block class "
                          f"once, the default) or False (compile the whole model).")
    return regions


def wrapper_switch(wrapper: Any) -> dict | None:
    """The graph-mode settings of ``optim_wrapper`` when it is a GraphOptimWrapper (a dict naming
    it, or one built: a wrapper class says so with its ``compiles_step`` attribute), else None."""
    from libai.registry import OPTIM_WRAPPERS

    if getattr(type(wrapper), "compiles_step", False):
        return dict(compile=wrapper.compile_options, on_failure=wrapper.on_failure,
                    exact_random=False)  # its options were checked when it was built
    if not isinstance(wrapper, Mapping) or not isinstance(wrapper.get("type"), str):
        return None
    cls = OPTIM_WRAPPERS.get(wrapper["type"], path="optim_wrapper")
    if not (isinstance(cls, type) and getattr(cls, "compiles_step", False)):
        return None
    return {k: wrapper[k] for k in ("compile", *GRAPH_KEYS) if k in wrapper}


def compile_options(cfg: dict | bool | None, exact_random: bool = True,
                    path: str = "optim_wrapper") -> dict[str, Any]:
    """Check ``optim_wrapper.compile`` (or the top-level ``compile``: ``path``) and return the
    keyword arguments for ``torch.compile``.

    ``mode`` is turned into inductor ``options`` (``torch._inductor.list_mode_options``) so that
    ``exact_random`` (inductor's ``fallback_random``: random numbers drawn as eager draws them)
    can be added to any mode; torch.compile does not accept both ``mode`` and ``options``.

    Raises:
        ConfigError: an unknown key, with the closest valid one.
    """
    options = {} if cfg in (None, True) else cfg
    if not isinstance(options, dict):
        raise ConfigError(
            f"{_key(path)} must be a dict of torch.compile arguments, e.g. "
            f"dict(mode='max-autotune', dynamic=False), got {cfg!r}."
        )
    options = dict(options)
    for key in options:
        if key not in COMPILE_KEYS:
            raise ConfigError(
                f"{_key(path)}.{key} is not a torch.compile argument."
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
                f"{_key(path)}.mode={mode!r} is not a torch.compile mode."
                f"{did_you_mean(str(mode), modes)} Valid: {', '.join(modes)}."
            ) from e
        if exact_random:
            inductor["fallback_random"] = True
        inductor.update(options.get("options") or {})
        if inductor:
            options["options"] = inductor
    return options


def _key(path: str) -> str:
    return "compile" if path == "compile" else f"{path}.compile"


def check_policy(name: str, value: str) -> str:
    if value not in _POLICIES:
        raise ConfigError(
            f"optim_wrapper.{name}={value!r} is not a policy."
            f"{did_you_mean(str(value), _POLICIES)} Use 'eager' or 'raise'.")
    return value
