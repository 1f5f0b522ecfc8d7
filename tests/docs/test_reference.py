"""docs/reference.md is what tools/gen_reference.py writes, and the examples in the tools' --help
texts are keys of the shipped configs."""

import re
import runpy
from pathlib import Path

import pytest

from libai.config import Config, ConfigError
from libai.runner.build import TOP_LEVEL_DEFAULTS, TOP_LEVEL_KEYS

REPO = Path(__file__).resolve().parents[2]
# where a --help example may belong: the quick-start config first, then the text models
SHIPPED = ["configs/digits_mlp.py", "configs/bert_tiny.py", "configs/gpt2_tiny.py"]
# `key.path=value` (or `+key.path=value`) inside a help text
_EXAMPLE = re.compile(r"(?<![\w.+-])\+?[a-z_]\w*(?:\.\w+)+=[^\s,;)]+")


@pytest.fixture(scope="module")
def gen():
    return runpy.run_path(str(REPO / "tools" / "gen_reference.py"), run_name="gen_reference")


def test_every_top_level_key_has_a_default():
    assert set(TOP_LEVEL_DEFAULTS) == set(TOP_LEVEL_KEYS), (
        "libai/runner/build.py: TOP_LEVEL_DEFAULTS must name the keys of TOP_LEVEL_KEYS")


def test_reference_page_is_fresh(gen):
    page = REPO / "docs" / "reference.md"
    assert page.read_text() == gen["render"](), (
        "docs/reference.md is stale (a tool's flags or the config key table changed): "
        "run `python tools/gen_reference.py` and commit docs/reference.md")


def _help_texts(gen):
    for path in gen["tool_paths"]():
        parser = gen["tool_parser"](path)
        yield path.name, parser.format_help()
        for name, (_, sub) in gen["subparsers"](parser).items():
            yield f"{path.name} {name}", sub.format_help()


def _applies(option: str) -> bool:
    for config in SHIPPED:
        cfg = Config.fromfile(str(REPO / config))
        try:
            cfg.merge_from_options([option])
        except ConfigError:
            continue
        return True
    return False


def test_help_examples_are_keys_of_the_shipped_configs(gen):
    examples = {}
    for tool, text in _help_texts(gen):
        for option in _EXAMPLE.findall(" ".join(text.split())):
            examples.setdefault(option.rstrip("."), tool)
    assert "optim_wrapper.optimizer.lr=0.01" in examples  # the --cfg-options help is read
    wrong = {o: tool for o, tool in examples.items() if not _applies(o)}
    assert not wrong, f"--help examples that no shipped config ({', '.join(SHIPPED)}) accepts: {wrong}"


def test_the_key_value_error_gives_a_real_example():
    cfg = Config.fromfile(str(REPO / SHIPPED[0]))
    with pytest.raises(ConfigError) as e:
        cfg.merge_from_options(["optim_wrapper.optimizer.lr"])
    example = _EXAMPLE.search(str(e.value)).group(0)
    assert _applies(example)
