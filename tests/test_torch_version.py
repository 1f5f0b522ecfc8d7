"""The torch libai asks for: a range in install_requires, one pinned release in constraints.txt,
and a one-line refusal of a torch older than the range (installed past pip). No device: these
read files and version strings."""

import importlib
import pathlib
import re

import pytest
import torch

import libai.runner
from libai.utils.errors import LibaiError
from libai.utils.torch_version import MIN_TORCH, TorchVersionError, check_torch, release

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _torch_lines(name):
    """The torch requirement lines of requirements/NAME, read as setup.py reads them."""
    lines = [line.split("#", 1)[0].strip() for line in (ROOT / "requirements" / name).open()]
    return [line for line in lines if re.match(r"torch\b", line)]


def test_install_requires_names_a_range_from_the_minimum_and_constraints_pin_one_release():
    # a pin in runtime.txt (install_requires) would make pip replace a GPU machine's CUDA torch
    assert _torch_lines("runtime.txt") == [f"torch>={MIN_TORCH}"]
    (pin,) = _torch_lines("constraints.txt")
    assert pin.startswith("torch==") and release(pin[len("torch=="):]) >= release(MIN_TORCH)


@pytest.mark.parametrize("old", ["2.9.1+cu128", "2.4.1", "1.13.1+cpu"])
def test_an_older_torch_is_refused_in_one_line_naming_the_minimum(old):
    with pytest.raises(TorchVersionError) as e:
        check_torch(old)
    msg = str(e.value)
    assert "\n" not in msg and f"torch>={MIN_TORCH}" in msg and f"torch {old} is installed" in msg
    assert isinstance(e.value, ImportError) and isinstance(e.value, LibaiError)


@pytest.mark.parametrize("ok", [MIN_TORCH, f"{MIN_TORCH}.0+cu130", "2.12.0a0+git1a2b",
                                "2.13.0.dev20260101+cpu", "3.0.0", "a-build-of-its-own"])
def test_builds_and_prereleases_of_the_minimum_or_later_pass(ok):
    check_torch(ok)


def test_the_runner_refuses_an_older_torch_when_imported(monkeypatch):
    check_torch()  # the torch this suite runs on is in the range
    monkeypatch.setattr(torch, "__version__", "2.4.0")
    try:
        with pytest.raises(TorchVersionError, match=r"torch 2\.4\.0 is installed"):
            importlib.reload(libai.runner)
    finally:
        monkeypatch.undo()
        importlib.reload(libai.runner)


def test_the_refusal_left_uncaught_prints_one_error_line(monkeypatch, capsys):
    """A tool imports the runner before its main() runs: the refusal reaches Python's top level,
    which prints it as one line (libai's hook), and anything else as before."""
    import sys

    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *args: seen.append(args[1]))
    with pytest.raises(TorchVersionError) as e:
        check_torch("2.9.1+cu128")
    sys.excepthook(TorchVersionError, e.value, None)
    assert capsys.readouterr().err == f"error: {e.value}\n"
    other = ValueError("not ours")
    sys.excepthook(ValueError, other, None)
    assert seen == [other]  # passed on to the hook that was there
