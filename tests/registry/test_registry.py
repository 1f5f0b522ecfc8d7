import sys
import textwrap

import pytest

from libai.registry import HOOKS, LOOPS, MODELS, OPTIMIZERS, Registry, build_from_cfg
from libai.utils.errors import BuildError, RegistryError


@pytest.fixture
def reg():
    return Registry("widget")


def test_register_as_decorator_and_call(reg):
    @reg.register_module()
    class Gear:
        def __init__(self, teeth=10):
            self.teeth = teeth

    def make_spring(k=1.0):
        return ("spring", k)

    reg.register_module(name="Spring", module=make_spring)
    assert reg.get("Gear") is Gear
    assert reg.build(dict(type="Gear", teeth=3)).teeth == 3
    assert reg.build(dict(type="Spring", k=2.0)) == ("spring", 2.0)
    assert "Gear" in reg and "Nope" not in reg
    assert sorted(reg.keys()) == ["Gear", "Spring"]


def test_register_several_names(reg):
    @reg.register_module(name=["A", "B"])
    class X:
        pass

    assert reg.get("A") is reg.get("B") is X


def test_duplicate_names_both_definitions(reg):
    @reg.register_module()
    class Gear:
        pass

    with pytest.raises(RegistryError) as exc:

        @reg.register_module(name="Gear")
        class Other:
            pass

    msg = str(exc.value)
    assert "'Gear' is already registered in registry 'widget'" in msg
    assert "test_duplicate_names_both_definitions.<locals>.Gear" in msg
    assert "Other" in msg and "force=True" in msg


def test_force_replaces(reg):
    @reg.register_module()
    class Gear:
        pass

    @reg.register_module(name="Gear", force=True)
    class Gear2:
        pass

    assert reg.get("Gear") is Gear2


def test_reregistering_same_object_is_fine(reg):
    class Gear:
        pass

    reg.register_module(module=Gear)
    reg.register_module(module=Gear)
    assert reg.get("Gear") is Gear


def test_miss_names_registry_scopes_and_suggestion():
    parent = Registry("model")
    child = Registry("detector", parent=parent)

    @parent.register_module()
    class ResNet:
        pass

    with pytest.raises(RegistryError) as exc:
        child.get("ResNte")
    msg = str(exc.value)
    assert "'ResNte' is not registered in registry 'detector'" in msg
    assert "searched 'detector' -> 'model'" in msg
    assert "Did you mean 'ResNet'?" in msg
    assert isinstance(exc.value, KeyError)  # except KeyError keeps working


def test_miss_without_close_names_lists_registered(reg):
    @reg.register_module()
    class Gear:
        pass

    msg = str(pytest.raises(RegistryError, reg.get, "Zzzzzzzz").value)
    assert "Registered names: Gear." in msg


def test_children_see_parents_but_not_siblings():
    parent = Registry("p")
    a, b = Registry("a", parent=parent), Registry("b", parent=parent)
    a.register_module(name="OnlyA", module=dict)
    parent.register_module(name="Shared", module=list)
    assert a.get("Shared") is list and b.get("Shared") is list
    with pytest.raises(RegistryError):
        b.get("OnlyA")


def test_child_overrides_parent_name():
    parent = Registry("p")
    child = Registry("c", parent=parent)
    parent.register_module(name="X", module=list)
    child.register_module(name="X", module=dict)
    assert child.get("X") is dict and parent.get("X") is list


def test_type_as_dotted_path_and_class(reg):
    assert reg.build(dict(type="collections.OrderedDict")) == {}
    from collections import Counter

    assert reg.build(dict(type=Counter)) == Counter()


def test_dotted_path_errors(reg):
    msg = str(pytest.raises(RegistryError, reg.get, "collections.OrderDict").value)
    assert "no attribute 'OrderDict'. Did you mean 'OrderedDict'" in msg
    msg = str(pytest.raises(RegistryError, reg.get, "no_such_pkg_xyz.Thing").value)
    assert "cannot be imported" in msg


def test_locations_are_imported_lazily_on_first_miss(tmp_path, monkeypatch):
    pkg = tmp_path / "lazy_widgets_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "registry.py").write_text(textwrap.dedent("""
        from libai.registry import Registry
        LAZY = Registry("lazy", locations=["lazy_widgets_pkg.parts"])
    """))
    (pkg / "parts.py").write_text(textwrap.dedent("""
        from lazy_widgets_pkg.registry import LAZY
        @LAZY.register_module()
        class Sprocket:
            pass
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    from lazy_widgets_pkg.registry import LAZY

    assert "lazy_widgets_pkg.parts" not in sys.modules
    assert LAZY.get("Sprocket").__name__ == "Sprocket"
    assert "lazy_widgets_pkg.parts" in sys.modules


def test_location_that_fails_to_import_is_explained():
    reg = Registry("broken", locations=["no_such_module_for_libai_tests"])
    msg = str(pytest.raises(RegistryError, reg.get, "Anything").value)
    assert "could not import 'no_such_module_for_libai_tests'" in msg


def test_build_unexpected_argument_names_path_and_closest(reg):
    @reg.register_module()
    class Encoder:
        def __init__(self, depth, hidden_size=8):
            pass

    with pytest.raises(BuildError) as exc:
        reg.build(dict(type="Encoder", depth=2, hiden_size=4), path="model.encoder")
    msg = str(exc.value)
    assert "at 'model.encoder'" in msg
    assert "unexpected argument 'hiden_size'" in msg
    assert "Did you mean 'hidden_size'?" in msg
    assert "Valid arguments: depth, hidden_size" in msg


def test_build_missing_argument(reg):
    @reg.register_module()
    class Encoder:
        def __init__(self, depth):
            pass

    msg = str(pytest.raises(BuildError, reg.build, dict(type="Encoder"), path="model").value)
    assert "missing required argument(s): 'depth'" in msg and "'model'" in msg


def test_nested_build_finds_config_path(reg):
    @reg.register_module()
    class Encoder:
        def __init__(self, depth):
            pass

    @reg.register_module()
    class Net:
        def __init__(self, encoder):
            self.encoder = reg.build(encoder)

    cfg = dict(type="Net", encoder=dict(type="Encoder", depht=3))
    msg = str(pytest.raises(BuildError, reg.build, cfg, path="model").value)
    assert "at 'model.encoder'" in msg and "Did you mean 'depth'?" in msg


def test_constructor_failure_is_wrapped_and_chained(reg):
    @reg.register_module()
    class Picky:
        def __init__(self, n):
            raise ValueError("n must be even")

    with pytest.raises(BuildError) as exc:
        reg.build(dict(type="Picky", n=3), path="model")
    assert "Building 'model' (" in str(exc.value) and "n must be even" in str(exc.value)
    assert isinstance(exc.value.__cause__, ValueError)


def test_build_without_type(reg):
    msg = str(pytest.raises(RegistryError, reg.build, dict(depth=2), path="model").value)
    assert "'model' needs a 'type' key" in msg and "depth" in msg


def test_default_args_and_cfg_wins(reg):
    @reg.register_module()
    class P:
        def __init__(self, a, b=0):
            self.a, self.b = a, b

    p = reg.build(dict(type="P", a=1), default_args=dict(a=5, b=7))
    assert (p.a, p.b) == (1, 7)
    p = build_from_cfg(dict(a=2), reg, default_args=dict(type="P"))
    assert p.a == 2


def test_build_rejects_non_dict(reg):
    msg = str(pytest.raises(BuildError, reg.build, ["not", "a", "dict"], path="model").value)
    assert "expected a dict with a 'type' key" in msg and "'model'" in msg


def test_build_does_not_mutate_cfg(reg):
    reg.register_module(name="D", module=dict)
    cfg = dict(type="D", x=1)
    reg.build(cfg)
    assert cfg == dict(type="D", x=1)


def test_root_registries_are_filled_lazily():
    assert OPTIMIZERS.get("AdamW").__name__ == "AdamW"
    assert OPTIMIZERS.get("SGD").__module__.startswith("torch.optim")
    assert LOOPS.get("IterBasedTrainLoop").__name__ == "IterBasedTrainLoop"
    assert HOOKS.get("CheckpointHook").__name__ == "CheckpointHook"
    assert MODELS.get("DigitsMLP").__name__ == "DigitsMLP"
