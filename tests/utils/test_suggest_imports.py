"""The shared helpers of libai.utils that several packages use for their messages and imports:
the one line an unknown key or choice gets (libai.utils.suggest) and importing a module from a
folder that is on ``sys.path`` only meanwhile (libai.utils.imports). CPU only, no processes."""

import sys
import uuid

import pytest

from libai.utils.errors import ConfigError, DataError
from libai.utils.imports import import_module, module_missing, not_on_sys_path, on_sys_path
from libai.utils.suggest import refuse_unknown, unknown


def test_unknown_is_one_line_with_the_closest_and_every_valid_name():
    line = unknown(
        "custom_imports has an unknown key 'import_'",
        "import_",
        ("imports", "allow_failed_imports"),
    )
    assert line == (
        "custom_imports has an unknown key 'import_'. Did you mean 'imports'? "
        "Valid keys: imports, allow_failed_imports."
    )
    assert unknown("Unknown split 'x'", 3, ("train", "val"), "Choose from") == (
        "Unknown split 'x'. Choose from train, val."
    )  # nothing close, a non-string name


def test_refuse_unknown_names_the_first_unknown_key_with_the_error_asked_for():
    refuse_unknown({"a": 1, "b": 2}, ("a", "b", "c"), lambda k: f"bad {k}")  # all known: quiet
    with pytest.raises(
        ConfigError,
        match=r"^compile.mod is not a torch.compile argument\. Did you "
        r"mean 'mode'\? Valid: mode, fullgraph\.$",
    ):
        refuse_unknown(
            {"fullgraph": True, "mod": 1},
            ("mode", "fullgraph"),
            lambda k: f"compile.{k} is not a torch.compile argument",
            "Valid:",
        )
    with pytest.raises(DataError, match="bad z"):
        refuse_unknown(["z"], ("a",), lambda k: f"bad {k}", error=DataError)


def test_a_folder_is_on_sys_path_only_while_importing(tmp_path):
    name = f"h3_mod_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("VALUE = 7\n")
    before = list(sys.path)
    assert not_on_sys_path([str(tmp_path)]) == [str(tmp_path)]
    try:
        assert import_module(name, [str(tmp_path)]).VALUE == 7
    finally:
        sys.modules.pop(name, None)
    assert sys.path == before
    with on_sys_path([str(tmp_path), str(tmp_path)]):  # added once, removed once
        assert sys.path.count(str(tmp_path)) == 1
    assert sys.path == before


def test_module_missing_tells_an_absent_module_from_a_failing_import(tmp_path):
    name = f"h3_broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import h3_no_such_dependency\n")
    with pytest.raises(ModuleNotFoundError) as absent:
        import_module(f"{name}_absent.sub", [str(tmp_path)])
    assert module_missing(f"{name}_absent.sub", absent.value)
    with pytest.raises(ModuleNotFoundError) as failing:
        import_module(name, [str(tmp_path)])
    sys.modules.pop(name, None)
    assert not module_missing(name, failing.value)
    assert not module_missing(name, ValueError("not an import error"))
