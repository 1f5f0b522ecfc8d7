"""Build an optim wrapper from ``cfg.optim_wrapper`` and a model.

::

    optim_wrapper = dict(
        type="OptimWrapper",                       # or "AmpOptimWrapper"
        optimizer=dict(type="AdamW", lr=1e-3, weight_decay=0.01),
        paramwise_cfg=dict(bias_decay_mult=0.0, norm_decay_mult=0.0, layer_decay_rate=0.65,
                           custom_keys={"head": dict(lr_mult=10.0)}),
        clip_grad=dict(type="norm", max_norm=1.0),
        accumulative_counts=1,
        constructor="DefaultOptimWrapperConstructor",  # optional
    )

Built objects work too: ``optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3)`` (driven as
is, on the parameters of the model the runner trains) and ``optim_wrapper=OptimWrapper(...)``
(used as is).

A custom constructor is any class in OPTIM_WRAPPER_CONSTRUCTORS taking
``(optim_wrapper_cfg, paramwise_cfg=None)`` whose instances are called with the model.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from libai.model.graph.options import wrapper_switch
from libai.registry import OPTIM_WRAPPER_CONSTRUCTORS, OPTIM_WRAPPERS, OPTIMIZERS
from libai.utils.errors import ConfigError
from libai.utils.suggest import closest, did_you_mean

from ._build import build_unwrapped
from .fused import choose_implementation
from .layer_decay import LAYER_DECAY_KEYS, check_layer_decay_cfg, layer_decay_for
from .optim_wrapper import OptimWrapper

__all__ = ["DefaultOptimWrapperConstructor", "build_optim_wrapper", "check_optimizer_params"]

NORM_LAYERS: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._BatchNorm,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.modules.instancenorm._InstanceNorm,
    nn.LocalResponseNorm,
) + ((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ())

_MULT_KEYS = ("bias_lr_mult", "bias_decay_mult", "norm_decay_mult")
_PARAMWISE_KEYS = (*_MULT_KEYS, "custom_keys", *LAYER_DECAY_KEYS)
_CUSTOM_KEY_OPTIONS = ("lr_mult", "decay_mult")
_logger = logging.getLogger("libai")


def _is_multiplier(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value >= 0


def _check_paramwise_cfg(cfg: Mapping[str, Any]) -> None:
    for key in cfg:
        if key not in _PARAMWISE_KEYS:
            raise ConfigError(
                f"optim_wrapper.paramwise_cfg has an unknown key {key!r}."
                f"{did_you_mean(str(key), _PARAMWISE_KEYS)} Valid keys: "
                f"{', '.join(_PARAMWISE_KEYS)}."
            )
    for key in _MULT_KEYS:  # float() of them would fail only at the first step
        value = cfg.get(key)
        if value is not None and not _is_multiplier(value):
            raise ConfigError(f"optim_wrapper.paramwise_cfg.{key}={value!r}: expected a number "
                              f">= 0 (or None: no multiplier).")
    custom = cfg.get("custom_keys") or {}
    if not isinstance(custom, Mapping):
        raise ConfigError(
            f"optim_wrapper.paramwise_cfg.custom_keys must map a name substring to "
            f"dict(lr_mult=..., decay_mult=...), got {type(custom).__name__}."
        )
    for name, opts in custom.items():
        bad = [k for k in opts if k not in _CUSTOM_KEY_OPTIONS] if isinstance(opts, Mapping) else []
        if not isinstance(opts, Mapping) or bad or not opts:
            hint = did_you_mean(str(bad[0]), _CUSTOM_KEY_OPTIONS) if bad else ""
            raise ConfigError(
                f"optim_wrapper.paramwise_cfg.custom_keys[{name!r}] must be a dict with keys "
                f"among {', '.join(_CUSTOM_KEY_OPTIONS)} (an option it leaves out keeps the "
                f"other rules' value), got {opts!r}.{hint}"
            )
        for option, value in opts.items():
            if not _is_multiplier(value):
                raise ConfigError(
                    f"optim_wrapper.paramwise_cfg.custom_keys[{name!r}].{option}={value!r}: "
                    f"expected a number >= 0."
                )
    check_layer_decay_cfg(cfg)


def _signature_default(optimizer_cls: Any, name: str) -> Any:
    try:
        param = inspect.signature(optimizer_cls).parameters.get(name)
    except (TypeError, ValueError):
        return None
    if param is None or param.default is inspect.Parameter.empty:
        return None
    return param.default


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class DefaultOptimWrapperConstructor:
    """Builds the optimizer (with per-parameter options) and its wrapper.

    ``paramwise_cfg`` sets per-parameter multipliers of the optimizer's ``lr`` and
    ``weight_decay``:

    - ``bias_lr_mult`` / ``bias_decay_mult``: parameters named ``*.bias``.
    - ``norm_decay_mult``: every parameter of a normalization layer (BatchNorm, LayerNorm,
      GroupNorm, InstanceNorm, LocalResponseNorm, RMSNorm); it takes precedence over
      ``bias_decay_mult`` for a norm layer's bias.
    - ``custom_keys``: ``{substring: dict(lr_mult=..., decay_mult=...)}``; for a parameter whose
      full name contains the substring (the longest matching key wins), an option the entry
      names replaces the one the rules above give; an option it leaves out keeps theirs
      (``{"classifier": dict(lr_mult=10)}`` with ``bias_decay_mult=0``: the classifier's bias
      still has no weight decay).
    - ``layer_decay_rate`` (and ``layer_decay_blocks``): layer-wise lr decay
      (:mod:`libai.optim.layer_decay`); its factor multiplies the ``lr_mult`` of the rules
      above, custom keys included.

    Parameters that end up with the same options share one group. Frozen parameters
    (``requires_grad=False``) are left out of the optimizer.

    ``optimizer`` may also be a built ``torch.optim.Optimizer``: the wrapper then drives it as
    is (its parameters must belong to the model; ``paramwise_cfg`` cannot apply).

    Args:
        optim_wrapper_cfg: The ``optim_wrapper`` config without ``paramwise_cfg`` and
            ``constructor``; needs ``optimizer`` (a dict or a built optimizer).
        paramwise_cfg: See above. Defaults to None (one group, the optimizer's options).

    Raises:
        ConfigError: ``optimizer`` is missing or neither a dict nor an optimizer,
            ``paramwise_cfg`` has unknown keys, or is given with a built optimizer.
    """

    def __init__(self, optim_wrapper_cfg: Mapping, paramwise_cfg: Mapping | None = None) -> None:
        if not isinstance(optim_wrapper_cfg, Mapping) or "optimizer" not in optim_wrapper_cfg:
            keys = sorted(optim_wrapper_cfg) if isinstance(optim_wrapper_cfg, Mapping) else []
            raise ConfigError(
                f"optim_wrapper needs an 'optimizer' key (keys given: {keys or 'none'}). Add e.g. "
                f"optim_wrapper=dict(type='OptimWrapper', optimizer=dict(type='SGD', lr=0.01))."
            )
        self.optim_wrapper_cfg = dict(optim_wrapper_cfg)
        optimizer = self.optim_wrapper_cfg.pop("optimizer")
        self.paramwise_cfg = dict(paramwise_cfg or {})
        # A built optimizer is driven as is; its parameter groups are already made.
        self.optimizer = optimizer if isinstance(optimizer, torch.optim.Optimizer) else None
        if self.optimizer is not None and self.paramwise_cfg:
            raise ConfigError(
                f"optim_wrapper.paramwise_cfg cannot apply to a built optimizer "
                f"({type(optimizer).__name__}): its parameter groups are already made. Give "
                f"optim_wrapper.optimizer as a dict (e.g. dict(type="
                f"'{type(optimizer).__name__}', lr=...)) to use paramwise_cfg, or remove "
                f"paramwise_cfg and set the groups' options when building the optimizer."
            )
        if self.optimizer is None and not isinstance(optimizer, Mapping):
            raise ConfigError(
                f"optim_wrapper.optimizer must be a dict such as dict(type='AdamW', lr=1e-3) or "
                f"a built torch.optim.Optimizer, got {type(optimizer).__name__} {optimizer!r}."
            )
        self.optimizer_cfg = {} if self.optimizer is not None else dict(optimizer)
        _check_paramwise_cfg(self.paramwise_cfg)

    def __call__(self, model: nn.Module) -> OptimWrapper:
        """Build the optimizer over ``model``'s trainable parameters, then the wrapper."""
        if self.optimizer is not None:
            check_optimizer_params(self.optimizer, model, "optim_wrapper.optimizer")
            wrapper_cfg = {"type": "OptimWrapper", **self.optim_wrapper_cfg}
            return build_unwrapped(
                OPTIM_WRAPPERS, wrapper_cfg, {"optimizer": self.optimizer}, "optim_wrapper"
            )
        if self.paramwise_cfg:
            params: Any = self.param_groups(model)
        else:
            params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise ConfigError(
                f"{type(model).__name__} has no trainable parameters (all have "
                f"requires_grad=False): there is nothing to optimize."
            )
        wrapper_cfg = {"type": "OptimWrapper", **self.optim_wrapper_cfg}
        optimizer_cfg = self._with_implementation(params, wrapper_cfg["type"])
        optimizer = build_unwrapped(
            OPTIMIZERS, optimizer_cfg, {"params": params}, "optim_wrapper.optimizer"
        )
        return build_unwrapped(
            OPTIM_WRAPPERS, wrapper_cfg, {"optimizer": optimizer}, "optim_wrapper"
        )

    def _with_implementation(self, params: Any, wrapper_type: Any) -> dict[str, Any]:
        """The optimizer config with ``fused=True`` where every parameter is on CUDA (see
        :mod:`libai.optim.fused`), the choice logged in one line (INFO when libai chose or the
        config did, DEBUG when torch's default is kept)."""
        try:
            cls = OPTIMIZERS.get(self.optimizer_cfg.get("type"))
            compiled = wrapper_switch({"type": wrapper_type}) is not None  # the compile switch
        except Exception:  # an unknown type: building reports it, with the config path
            return self.optimizer_cfg
        extra, line = choose_implementation(cls, self.optimizer_cfg, params, compiled=compiled)
        if line is not None:  # torch's default left alone: said only at DEBUG
            _logger.log(logging.INFO if extra or line.endswith("says)") else logging.DEBUG, line)
        return {**self.optimizer_cfg, **extra}

    def _base_values(self) -> tuple[float | None, float | None]:
        """The optimizer's lr and weight_decay: from the config, else the class default."""
        cls = OPTIMIZERS.get(self.optimizer_cfg.get("type"), path="optim_wrapper.optimizer")
        lr = self.optimizer_cfg.get("lr", _signature_default(cls, "lr"))
        wd = self.optimizer_cfg.get("weight_decay", _signature_default(cls, "weight_decay"))
        return lr, wd

    def _multipliers(self, name: str, is_norm: bool, keys: list[str]) -> tuple[float, float]:
        """(lr_mult, decay_mult) of the parameter called ``name``; ``keys`` longest first."""
        cfg = self.paramwise_cfg
        is_bias = name.endswith(".bias") or name == "bias"
        lr_mult = 1.0
        if is_bias and cfg.get("bias_lr_mult") is not None:
            lr_mult = float(cfg["bias_lr_mult"])
        decay_mult = 1.0
        if is_norm and cfg.get("norm_decay_mult") is not None:
            decay_mult = float(cfg["norm_decay_mult"])
        elif is_bias and cfg.get("bias_decay_mult") is not None:
            decay_mult = float(cfg["bias_decay_mult"])
        key = next((k for k in keys if k in name), None)
        if key is not None:  # the entry overrides only the options it names
            opts = cfg["custom_keys"][key]
            lr_mult = float(opts.get("lr_mult", lr_mult))
            decay_mult = float(opts.get("decay_mult", decay_mult))
        return lr_mult, decay_mult

    def param_groups(self, model: nn.Module) -> list[dict[str, Any]]:
        """Parameter groups of ``model`` per ``paramwise_cfg``, identical options merged.

        Raises:
            ConfigError: a custom key matches no parameter name, or layer decay finds no
                blocks.
        """
        custom = self.paramwise_cfg.get("custom_keys") or {}
        keys = sorted(custom, key=len, reverse=True)
        base_lr, base_wd = self._base_values()
        rate = self.paramwise_cfg.get("layer_decay_rate")
        decay = None if rate is None else layer_decay_for(
            model, rate, self.paramwise_cfg.get("layer_decay_blocks"))
        groups: dict[tuple, dict[str, Any]] = {}
        seen: set[int] = set()
        names: list[str] = []
        for mod_name, module in model.named_modules():
            is_norm = isinstance(module, NORM_LAYERS)
            for p_name, param in module.named_parameters(recurse=False):
                name = f"{mod_name}.{p_name}" if mod_name else p_name
                names.append(name)
                if id(param) in seen or not param.requires_grad:
                    continue
                seen.add(id(param))
                lr_mult, decay_mult = self._multipliers(name, is_norm, keys)
                if decay is not None:
                    lr_mult *= decay.scale(param)
                options: dict[str, Any] = {}
                if lr_mult != 1.0 and base_lr is not None:
                    options["lr"] = base_lr * lr_mult
                if decay_mult != 1.0 and base_wd is not None:
                    options["weight_decay"] = base_wd * decay_mult
                group = groups.setdefault(tuple(sorted(options.items())), {"params": [], **options})
                group["params"].append(param)
        self._check_custom_keys(keys, names, model)
        if decay is not None:
            _logger.info(decay.summary((n, p) for n, p in model.named_parameters()
                                       if p.requires_grad))
        return list(groups.values())

    @staticmethod
    def _check_custom_keys(keys: list[str], names: list[str], model: nn.Module) -> None:
        for key in keys:
            if any(key in n for n in names):
                continue
            module_names = [m for m, _ in model.named_modules() if m]
            near = closest(key, module_names + names, n=5)
            hint = (
                f" Close names: {', '.join(repr(n) for n in near)}."
                if near
                else f" Some parameter names: {', '.join(repr(n) for n in names[:8])}."
            )
            raise ConfigError(
                f"optim_wrapper.paramwise_cfg.custom_keys[{key!r}] matches no parameter of "
                f"{type(model).__name__} (a key matches a parameter whose full name contains "
                f"it).{hint}"
            )


def check_optimizer_params(optimizer: torch.optim.Optimizer, model: nn.Module, path: str) -> None:
    """Refuse a built optimizer whose parameters are not (all) parameters of ``model``.

    Such an optimizer would step other tensors than the ones the runner trains, and training
    would silently do nothing, e.g. when the config builds the optimizer on a model of its own
    and gives ``model`` as a dict, which the runner builds anew.
    """
    own = {id(p) for p in model.parameters()}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    foreign = sum(id(p) not in own for p in params)
    if not foreign:
        return
    name = type(optimizer).__name__
    model_name = type(getattr(model, "module", model)).__name__
    raise ConfigError(
        f"{path}: {foreign} of the {len(params)} parameters of the built {name} are not "
        f"parameters of the model the runner trains ({model_name}). Build the optimizer "
        f"on that model: build the model in the config too and give it as model=... "
        f"(model = MyNet(); optim_wrapper=dict(optimizer=torch.optim.{name}(model.parameters(), "
        f"lr=...))), or give optim_wrapper.optimizer as a dict: dict(type='{name}', lr=...)."
    )


def build_optim_wrapper(model: nn.Module, cfg: Mapping[str, Any] | OptimWrapper) -> OptimWrapper:
    """Build the optim wrapper described by ``cfg`` (the ``optim_wrapper`` config) for ``model``.

    Args:
        model: The model to optimize (possibly DDP-wrapped; names then start with ``module.``).
        cfg: ``dict(type=..., optimizer=..., paramwise_cfg=..., constructor=..., ...)``;
            ``constructor`` defaults to "DefaultOptimWrapperConstructor". Not modified.

    Returns:
        The built wrapper; a built OptimWrapper given as ``cfg`` is returned as is.

    Raises:
        ConfigError: ``cfg`` is neither a dict nor an OptimWrapper, or a built optimizer (or
            wrapper) holds parameters that are not ``model``'s.
    """
    if isinstance(cfg, OptimWrapper):
        check_optimizer_params(cfg.optimizer, model, "optim_wrapper")
        return cfg
    if isinstance(cfg, torch.optim.Optimizer):
        raise ConfigError(
            f"optim_wrapper is a {type(cfg).__name__}, an optimizer: give it as "
            f"optim_wrapper=dict(optimizer=<the optimizer>), or an OptimWrapper instance."
        )
    if not isinstance(cfg, Mapping):
        raise ConfigError(
            f"optim_wrapper must be a dict such as dict(type='OptimWrapper', "
            f"optimizer=dict(type='SGD', lr=0.01)), or a built OptimWrapper, got "
            f"{type(cfg).__name__}."
        )
    wrapper_cfg = dict(cfg)
    constructor_type = wrapper_cfg.pop("constructor", "DefaultOptimWrapperConstructor")
    paramwise_cfg = wrapper_cfg.pop("paramwise_cfg", None)
    constructor_cfg = {
        "type": constructor_type,
        "optim_wrapper_cfg": wrapper_cfg,
        "paramwise_cfg": paramwise_cfg,
    }
    constructor = build_unwrapped(
        OPTIM_WRAPPER_CONSTRUCTORS, constructor_cfg, None, "optim_wrapper.constructor"
    )
    return constructor(model)
