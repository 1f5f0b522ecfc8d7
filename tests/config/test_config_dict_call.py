"""A Python config calling dict() on something that is not a mapping: one line naming the config
file, the line and what dict() takes; through the command line, no traceback."""

import os

import pytest

from libai.config import Config
from libai.utils.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGITS = os.path.join(ROOT, "configs", "digits_mlp.py")


@pytest.mark.parametrize("body, error", [
    ("model = dict(None)", "TypeError: 'NoneType' object is not iterable"),
    ("model = dict(_base_.param_scheduler)", "ValueError: dictionary update sequence element #0"),
    ("model = dict(_base_.model, **_base_.work_dir)",
     "TypeError: dict() argument after ** must be a mapping, not str"),
])
def test_dict_of_a_non_mapping_is_one_line_naming_file_and_line(tmp_path, body, error):
    path = tmp_path / "cfg.py"
    path.write_text(f"_base_ = [{DIGITS!r}]\n\n{body}\n")
    with pytest.raises(ConfigError) as info:
        Config.fromfile(str(path))
    line = str(info.value)
    assert line.startswith(f"error in config {path}, line 3: {error}") and "\n" not in line
    assert line.endswith("(dict() takes another dict or key=value arguments)")


def test_through_the_command_line(tmp_path, run_tool):
    path = tmp_path / "cfg.py"
    path.write_text("x = 3\nmodel = dict(x)\n")
    out = run_tool("tools/print_config.py", path, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"error: error in config {path}, line 2: TypeError: 'int' object is not iterable "
        f"(dict() takes another dict or key=value arguments)"]
