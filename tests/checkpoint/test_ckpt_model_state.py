"""load_model_state: prefix stripping, remap, grouped reports and strict errors."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn

from libai.checkpoint import (
    LoadReport,
    group_keys,
    load_model_state,
    model_state_for_saving,
    strip_prefixes,
)
from libai.utils.errors import CheckpointError


class Net(nn.Module):
    def __init__(self, classes: int = 5, layers: int = 4) -> None:
        super().__init__()
        self.encoder = nn.Module()
        self.encoder.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(layers))
        self.head = nn.Linear(8, classes)


class Wrapper(nn.Module):
    """Stands in for DDP: same ``.module`` attribute, same key prefix."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


def _prefixed(state: dict, prefix: str) -> OrderedDict:
    return OrderedDict((prefix + k, v) for k, v in state.items())


def _params_equal(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_same_model_loads_strictly():
    src, dst = Net(), Net()
    report = load_model_state(dst, src.state_dict())
    assert report.ok and _params_equal(src, dst)
    assert str(report) == "Loaded all 10 model entries from the checkpoint."


@pytest.mark.parametrize(
    "prefix", ["module.", "_orig_mod.", "module._orig_mod.", "_orig_mod.module."]
)
def test_wrapper_prefixes_are_stripped(prefix):
    src, dst = Net(), Net()
    report = load_model_state(dst, _prefixed(src.state_dict(), prefix))
    assert report.ok and _params_equal(src, dst)
    assert set(report.stripped_prefixes) == {p + "." for p in prefix.split(".")[:-1]}
    assert "Stripped wrapper prefixes" in str(report)


def test_real_ddp_wrapper_round_trip(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        src = Net()
        ddp = nn.parallel.DistributedDataParallel(src)
        assert all(k.startswith("module.") for k in ddp.state_dict())
        saved = model_state_for_saving(ddp)
        assert list(saved) == list(src.state_dict())
        assert load_model_state(Net(), ddp.state_dict()).ok  # prefixed keys into a plain model
        target = nn.parallel.DistributedDataParallel(Net())
        assert load_model_state(target, saved).ok  # plain keys into a DDP model
        assert _params_equal(src, target.module)
    finally:
        dist.destroy_process_group()


def test_model_whose_only_child_is_named_module():
    src, dst = Wrapper(Net()), Wrapper(Net())
    assert load_model_state(dst, src.state_dict()).ok
    assert _params_equal(src, dst)
    assert load_model_state(Net(), src.state_dict()).ok


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_model_state_for_saving_unwraps_compile():
    model = Net()
    compiled = torch.compile(model, backend="aot_eager")  # never called: wrapping is enough
    assert all(k.startswith("_orig_mod.") for k in compiled.state_dict())
    saved = model_state_for_saving(compiled)
    assert list(saved) == list(model.state_dict())
    # Returned as is: same storage and device, no copy.
    assert saved["head.weight"].data_ptr() == model.head.weight.data_ptr()
    # A compiled submodule puts _orig_mod in the middle of the key.
    model.head = torch.compile(model.head, backend="aot_eager")
    assert "head._orig_mod.weight" in model.state_dict()
    assert "head.weight" in model_state_for_saving(model)
    fresh = Net()
    assert load_model_state(fresh, model.state_dict()).ok
    assert load_model_state(model, fresh.state_dict()).ok  # and into the compiled one


def test_strip_prefixes_only_strips_when_every_key_has_it():
    state = OrderedDict([("module.weight", 1), ("other.weight", 2)])
    assert list(strip_prefixes(state)) == ["module.weight", "other.weight"]
    with pytest.raises(CheckpointError, match="collide"):
        strip_prefixes(OrderedDict([("a._orig_mod.w", 1), ("a.w", 2)]))


def test_strict_error_groups_keys_and_names_shapes():
    src = Net(classes=10)
    state = OrderedDict((k, v) for k, v in src.state_dict().items() if not k.startswith("encoder"))
    state["extra.block.0.weight"] = torch.zeros(2)
    state["extra.block.1.weight"] = torch.zeros(2)
    dst = Net(classes=5)
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    with pytest.raises(CheckpointError) as info:
        load_model_state(dst, state)
    msg = str(info.value)
    assert "strict=True" in msg and "nothing was loaded" in msg
    assert "Loaded 0 of 10 model entries" in msg
    assert (
        "Missing in the checkpoint (8; left as initialised):\n  encoder.layers.* (8 keys; indices 0-3)"
        in msg
    )
    assert (
        "Unexpected in the checkpoint (2; ignored):\n  extra.block.* (2 keys; indices 0-1)" in msg
    )
    assert "head.weight: checkpoint (10, 8) vs model (5, 8)" in msg
    assert "head.bias: checkpoint (10,) vs model (5,)" in msg
    assert "strict=False" in msg and "remap" in msg
    after = dst.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_non_strict_loads_what_matches_and_reports():
    src, dst = Net(classes=10), Net(classes=5)
    head_before = dst.head.weight.detach().clone()
    report = load_model_state(dst, src.state_dict(), strict=False)
    assert isinstance(report, LoadReport) and not report.ok
    assert report.shape_mismatches == [
        ("head.weight", (10, 8), (5, 8)),
        ("head.bias", (10,), (5,)),
    ]
    assert report.missing == [] and report.unexpected == []
    assert len(report.loaded) == 8
    assert torch.equal(dst.head.weight, head_before)
    assert torch.equal(dst.encoder.layers[2].weight, src.encoder.layers[2].weight)
    text = str(report)
    assert text.startswith("Loaded 8 of 10 model entries")
    assert "Shape mismatch (2; not loaded)" in text


@pytest.mark.parametrize(
    "remap",
    [{"backbone.": "encoder."}, [(r"^backbone\.", "encoder.")]],
    ids=["prefix-dict", "regex-list"],
)
def test_remap_renames_checkpoint_keys(remap):
    src = Net()
    state = OrderedDict(
        (k.replace("encoder.", "backbone.", 1), v) for k, v in src.state_dict().items()
    )
    dst = Net()
    with pytest.raises(CheckpointError, match=r"remap=\{'backbone\.': 'encoder\.'\}"):
        load_model_state(dst, state)  # the error suggests the rename
    report = load_model_state(dst, state, remap=remap)
    assert report.ok and report.renamed == 8 and _params_equal(src, dst)
    assert "Renamed 8 checkpoint keys" in str(report)


def test_remap_errors():
    state = Net().state_dict()
    with pytest.raises(CheckpointError, match="maps both"):
        load_model_state(Net(), state, remap=[(r"\.weight$", ".bias")])
    with pytest.raises(CheckpointError, match="not a valid regex"):
        load_model_state(Net(), state, remap=[("(", "")])
    with pytest.raises(CheckpointError, match="not a \\(regex, replacement\\) pair"):
        load_model_state(Net(), state, remap=["head"])


def test_group_keys():
    layers = [f"encoder.layers.{i}.{p}" for i in range(24) for p in ("weight", "bias")]
    assert group_keys(layers) == ["encoder.layers.* (48 keys; indices 0-23)"]
    some = [k for k in layers if k.split(".")[2] in {"2", "3", "7", "20", "21", "22"}]
    assert group_keys(some) == ["encoder.layers.* (12 keys; indices 2-3, 7, 20-22)"]
    assert group_keys(["enc.layers.5.fc.weight", "enc.layers.5.fc.bias"]) == [
        "enc.layers.5.* (2 keys)"
    ]
    assert group_keys(["head.weight", "head.bias", "scale"]) == ["head.* (2 keys)", "scale"]
    many = [f"m{i}.sub.weight" for i in range(30)] + [f"m{i}.other.weight" for i in range(30)]
    lines = group_keys(many, max_lines=5)
    assert len(lines) == 5 and lines[-1] == "... and 26 more groups"
    assert lines[0] == "m0.* (2 keys)"


def test_the_empty_state_dict_of_a_sharded_checkpoint_names_the_reader(tmp_path):
    # CPU, in-process: a sharded checkpoint's .pth holds state_dict={} (the weights are in its
    # .dcp folder). "pass strict=False" would give a random model: the error names the readers.
    from libai.checkpoint import checkpoint_weights, load_checkpoint, save_checkpoint
    from libai.checkpoint.sharded import save_weights_sharded

    net = Net()
    path = tmp_path / "iter_4.pth"
    listing = save_weights_sharded(model_state_for_saving(net), path)
    save_checkpoint({"state_dict": {}, "sharded": listing}, path)
    for strict in (True, False):
        with pytest.raises(CheckpointError, match="holds no model weights") as info:
            load_model_state(Net(), load_checkpoint(path)["state_dict"], strict=strict)
        assert "sharded2file" in str(info.value) and "strict=False" not in str(info.value)
    other = Net()
    assert load_model_state(other, checkpoint_weights(str(path))).ok
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(),
                                                  other.state_dict().values()))
