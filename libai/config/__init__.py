"""Configs: load ``.py``/``.yaml``/``.json`` files with ``_base_`` inheritance, override values
from the command line, dump, compare, and freeze. See ``docs/config.md``.

This package sits at layer 1: it may import ``libai.utils`` but never ``libai.registry``.
"""

# the errors a user of configs catches (ConfigKeyError is a ConfigError)
from libai.utils.errors import ConfigError, LibaiError

from .config import Config
from .config_dict import ConfigDict, ConfigKeyError, FrozenList
from .diff import MISSING
from .options import DictAction, add_cfg_options_argument, get_by_path, parse_value, set_by_path

__all__ = [
    "MISSING",
    "Config",
    "ConfigDict",
    "ConfigError",
    "ConfigKeyError",
    "DictAction",
    "FrozenList",
    "LibaiError",
    "add_cfg_options_argument",
    "get_by_path",
    "parse_value",
    "set_by_path",
]
