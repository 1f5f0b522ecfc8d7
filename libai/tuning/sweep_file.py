"""A sweep file, read and checked: what :func:`libai.tuning.sweep.run_sweep` varies (the format
is described in :mod:`libai.tuning.sweep`)."""

from __future__ import annotations

import ast
import math
import os
from collections.abc import Mapping
from typing import Any

from libai.config import Config
from libai.utils.errors import ConfigError
from libai.utils.optuna_study import build_pruner
from libai.utils.suggest import did_you_mean

__all__ = ["KEYS", "STRATEGIES", "Param", "Sweep"]

STRATEGIES = ("grid", "random", "bayes")
KEYS = ("config", "metric", "strategy", "trials", "params", "cfg_options", "pruner", "seed",
        "study_name", "study_dir", "parallel", "trial_timeout")


def _check_study_dir(path: str, name: str) -> None:
    """The study's folder is a folder, or can be made: a file in its place is one line now."""
    here = path
    while here and not os.path.exists(here):
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent
    if here and not os.path.isdir(here):
        what = "is a file" if here == path else f"lies under a file ({here})"
        raise ConfigError(f"{name} {path} {what}, not a folder: give the study a folder (one "
                          f"that does not exist yet is made).")


# ------------------------------------------------------------------------ the sweep file
class Param:
    """One swept parameter: choices, or a float / int range."""

    def __init__(self, name: str, spec: Any) -> None:
        self.name = name
        where = f"params['{name}']"
        if isinstance(spec, (list, tuple)):
            spec = {"choices": list(spec)}
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where} must be dict(choices=[...]) or dict(type='float', "
                              f"low=..., high=...), got {spec!r}.")
        spec = dict(spec)
        kind = spec.pop("type", "categorical" if "choices" in spec else None)
        if kind not in ("categorical", "float", "int"):
            raise ConfigError(f"{where}: type must be 'float', 'int' or 'categorical' (or give "
                              f"choices=[...]), got {kind!r}.")
        self.kind = kind
        if kind == "categorical":
            allowed = {"choices"}
            choices = spec.get("choices")
            if not isinstance(choices, (list, tuple)) or not choices:
                raise ConfigError(f"{where}: choices must be a non-empty list, got {choices!r}.")
            self.choices = list(choices)
            # Optuna stores None, bool, int, float and str; other values travel as their repr
            self.encoded = not all(v is None or isinstance(v, (bool, int, float, str))
                                   for v in self.choices)
        else:
            allowed = {"low", "high", "log", "step"}
            for key in ("low", "high"):
                if key not in spec:
                    raise ConfigError(f"{where}: a {kind} range needs low= and high=.")
            num = (int,) if kind == "int" else (int, float)
            self.low, self.high = spec["low"], spec["high"]
            self.log, self.step = bool(spec.get("log", False)), spec.get("step")
            for key in ("low", "high") + (("step",) if self.step is not None else ()):
                value = spec[key]
                if isinstance(value, bool) or not isinstance(value, num):
                    what = "an int" if kind == "int" else "a number"
                    raise ConfigError(f"{where}: {key} must be {what}, got {value!r}.")
            if not self.low < self.high:
                raise ConfigError(f"{where}: low ({self.low}) must be below high ({self.high}).")
            if self.log and self.low <= 0:
                raise ConfigError(f"{where}: a log range needs low > 0, got {self.low}.")
            if self.log and self.step is not None:
                raise ConfigError(f"{where}: give step= or log=True, not both.")
            if self.step is not None and self.step <= 0:
                raise ConfigError(f"{where}: step must be > 0, got {self.step}.")
        unknown = set(spec) - allowed
        if unknown:
            key = sorted(unknown)[0]
            raise ConfigError(f"{where}: unknown key '{key}'.{did_you_mean(key, allowed)} "
                              f"Keys of a {kind} parameter: {', '.join(sorted(allowed))}.")

    def grid(self) -> list[Any]:
        """Every value of the parameter, for a grid (as Optuna stores them)."""
        if self.kind == "categorical":
            return [repr(v) for v in self.choices] if self.encoded else list(self.choices)
        if self.step is None:
            raise ConfigError(
                f"strategy='grid' needs the values of every parameter, but params['{self.name}'] "
                f"is a {self.kind} range without a step. Give dict(choices=[...]), or "
                f"step= (e.g. dict(type='{self.kind}', low={self.low}, high={self.high}, "
                f"step=...)), or use strategy='random' or 'bayes'.")
        count = int(math.floor((self.high - self.low) / self.step + 1e-9))
        values = [self.low + i * self.step for i in range(count + 1)]
        return [int(v) for v in values] if self.kind == "int" else [round(v, 12) for v in values]

    def suggest(self, trial: Any) -> Any:
        """The trial's value (decoded: what the config gets)."""
        if self.kind == "categorical":
            stored = [repr(v) for v in self.choices] if self.encoded else self.choices
            value = trial.suggest_categorical(self.name, stored)
            return ast.literal_eval(value) if self.encoded else value
        if self.kind == "int":
            return trial.suggest_int(self.name, self.low, self.high, step=self.step or 1,
                                     log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, step=self.step, log=self.log)

    def decode(self, value: Any) -> Any:
        return ast.literal_eval(value) if self.kind == "categorical" and self.encoded else value

    def first(self) -> Any:
        return self.choices[0] if self.kind == "categorical" else self.low

    def describe(self) -> Any:
        if self.kind == "categorical":
            return {"choices": [repr(v) for v in self.choices]}
        return {"type": self.kind, "low": self.low, "high": self.high, "log": self.log,
                "step": self.step}


class Sweep:
    """The validated contents of a sweep file, with the command-line overrides (``args``: an
    object with ``trials``, ``parallel`` and ``study_dir``, each None to keep the file's, and
    ``cfg_options``, ``KEY=VALUE`` words applied to every trial after the file's own)."""

    def __init__(self, path: str, args: Any) -> None:
        raw = Config.fromfile(path).to_dict()
        self.path = os.path.abspath(path)
        unknown = [k for k in raw if k not in KEYS]
        if unknown:
            raise ConfigError(f"sweep file {path}: unknown key '{unknown[0]}'."
                              f"{did_you_mean(unknown[0], KEYS)} Keys: {', '.join(KEYS)}.")
        for key in ("config", "metric", "params"):
            if key not in raw:
                raise ConfigError(f"sweep file {path} has no '{key}'; see tools/sweep.py --help "
                                  f"or configs/sweeps/digits_lr.py.")
        self.config = self._find_config(raw["config"])
        metric = raw["metric"]
        if isinstance(metric, str):
            metric = {"key": metric}
        if not isinstance(metric, Mapping) or not isinstance(metric.get("key"), str):
            raise ConfigError(f"metric must be dict(key='val/accuracy', mode='max'), got "
                              f"{metric!r}.")
        self.metric = str(metric["key"])
        self.mode = metric.get("mode")
        if self.mode not in ("max", "min"):
            raise ConfigError(f"metric.mode must be 'max' or 'min', got {self.mode!r}.")
        self.summary = metric.get("summary", "last")
        if self.summary not in ("last", "best"):
            raise ConfigError(f"metric.summary must be 'last' (the metric at the last "
                              f"validation) or 'best', got {self.summary!r}.")
        extra = set(metric) - {"key", "mode", "summary"}
        if extra:
            raise ConfigError(f"metric has unknown key(s) {sorted(extra)}; keys: key, mode, "
                              f"summary.")
        self.strategy = raw.get("strategy", "bayes")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"strategy must be one of {', '.join(STRATEGIES)}, got "
                              f"{self.strategy!r}.{did_you_mean(str(self.strategy), STRATEGIES)}")
        params = raw["params"]
        if not isinstance(params, Mapping) or not params:
            raise ConfigError("params must be a non-empty dict {config key: spec}.")
        self.params = [Param(str(k), v) for k, v in params.items()]
        options = raw.get("cfg_options") or []
        if isinstance(options, Mapping):
            options = [f"{k}={v!r}" for k, v in options.items()]
        if isinstance(options, str) or not all(isinstance(o, str) and "=" in o for o in options):
            raise ConfigError(f"cfg_options must be a list of 'KEY=VALUE' strings, got "
                              f"{options!r}.")
        self.cfg_options = [*options, *(getattr(args, "cfg_options", None) or [])]
        self.seed = raw.get("seed", 0)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an int, got {self.seed!r}.")
        self.grid_size = 0
        if self.strategy == "grid":
            self.search_space = {p.name: p.grid() for p in self.params}
            self.grid_size = math.prod(len(v) for v in self.search_space.values())
        trials = args.trials if args.trials is not None else raw.get("trials")
        if args.trials is not None and (isinstance(args.trials, bool) or args.trials < 1):
            raise ConfigError(f"--trials must be an int >= 1, got {args.trials!r}.")
        if self.strategy == "grid":  # --trials N runs the first N points of the grid
            self.trials = min(args.trials or self.grid_size, self.grid_size)
        elif isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
            raise ConfigError(f"strategy='{self.strategy}' needs trials= (an int >= 1) in the "
                              f"sweep file or --trials, got {trials!r}.")
        else:
            self.trials = trials
        self.pruner = raw.get("pruner")
        if self.pruner is not None:
            build_pruner(self.pruner)  # a bad pruner fails now, not in every trial
        parallel = args.parallel if args.parallel is not None else raw.get("parallel", 1)
        if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
            raise ConfigError(f"--parallel must be an int >= 1, got {parallel!r}.")
        self.parallel = parallel
        timeout = raw.get("trial_timeout")
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ConfigError(f"trial_timeout must be a number of seconds > 0, got {timeout!r}.")
        self.trial_timeout = timeout
        self.study_name = str(raw.get("study_name")
                              or os.path.splitext(os.path.basename(path))[0])
        self.study_dir = os.path.abspath(args.study_dir or raw.get("study_dir")
                                         or os.path.join("work_dirs", "sweeps", self.study_name))
        _check_study_dir(self.study_dir, "--study-dir" if args.study_dir else "study_dir")
        self.base_cfg = self._check_keys()

    def _find_config(self, config: Any) -> str:
        if not isinstance(config, str) or not config:
            raise ConfigError(f"config must be the path of a config file, got {config!r}.")
        if config.startswith("libai::") or os.path.isabs(config):
            return config
        here = os.path.join(os.path.dirname(self.path), config)  # like _base_
        return os.path.abspath(here if os.path.exists(here) else config)

    def _check_keys(self) -> Config:
        """Load the config with the fixed options and the first value of each parameter: a
        misspelt key fails here, once, with a suggestion."""
        self._file_cfg = Config.fromfile(self.config)
        try:
            cfg = self.trial_config({})
        except ConfigError as e:
            raise ConfigError(f"cfg_options: {e}") from None
        try:
            self.trial_config({p.name: p.first() for p in self.params})
        except ConfigError as e:
            raise ConfigError(f"params: {e}") from None
        return cfg

    def trial_config(self, values: Mapping[str, Any]) -> Config:
        """The config as a trial with ``values`` runs it: ``libai train CONFIG --cfg-options
        <cfg_options> <values>``, where a default hook is a key without ``+`` (judged on the
        config file, as ``libai train`` judges all its options at once)."""
        from libai.hooks import default_hook_options

        cfg = self._file_cfg.copy()
        cfg.merge_from_options(default_hook_options(self._file_cfg, self.cfg_options))
        cfg.merge_from_options(default_hook_options(self._file_cfg, values))
        return cfg

    def signature(self) -> dict[str, Any]:
        """What a resumed study must agree on."""
        return {"config": self.config, "metric": self.metric, "mode": self.mode,
                "summary": self.summary, "strategy": self.strategy, "seed": self.seed,
                "params": {p.name: p.describe() for p in self.params},
                "cfg_options": self.cfg_options}

    def option(self, name: str, value: Any) -> str:
        return f"{name}={value!r}"


