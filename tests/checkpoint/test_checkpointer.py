"""The Checkpointer as an object: named parts in and out of the file, the save at a stop signal
through the save policy, and the parts' adapters."""

from libai.checkpoint import Checkpointer, load_checkpoint
from libai.checkpoint.parts import HookStates, StateList
from libai.hooks import Hook
from libai.runner import Runner
from libai.testing import toy_config


class Counter:
    """A part of the user's own: anything with state_dict / load_state_dict."""

    def __init__(self) -> None:
        self.n = 0

    def state_dict(self) -> dict:
        return {"n": self.n}

    def load_state_dict(self, state: dict) -> None:
        self.n = state["n"]


def _config(tmp_path, **kw):
    kw.setdefault("default_hooks", dict(checkpoint=dict(type="CheckpointHook", interval=2)))
    kw["default_hooks"].setdefault("logger", dict(plot=False))  # no plot process
    kw["train_cfg"] = {"max_iters": 4, "val_interval": 10, **kw.get("train_cfg", {})}
    return toy_config(work_dir=str(tmp_path), **kw)


def test_a_named_part_is_saved_and_restored_on_resume(tmp_path):
    runner = Runner.from_cfg(_config(tmp_path))
    assert isinstance(runner.checkpointer, Checkpointer)
    counter = Counter()
    counter.n = 7
    runner.checkpointer.track(counter=counter)
    runner.train()
    ckpt = load_checkpoint(str(tmp_path / "iter_4.pth"))
    assert ckpt["counter"] == {"n": 7} and ckpt["loop"]["iter"] == 4

    again = Runner.from_cfg(_config(tmp_path, resume=True, train_cfg=dict(max_iters=6),
                                    resume_options=dict(allow_changes=["train_cfg.max_iters"])))
    restored = Counter()
    again.checkpointer.track(counter=restored)
    again.train()
    assert restored.n == 7 and again.iter == 6


def test_the_stop_save_goes_through_the_save_policy(tmp_path):
    runner = Runner.from_cfg(_config(tmp_path))
    runner.train()
    hook = runner.checkpointer.schedule
    assert type(hook).__name__ == "CheckpointHook"
    path = runner.checkpointer.save_at_stop(runner.iter, force=True)
    assert path == str(tmp_path / "iter_4.pth") and hook.kept[-1] == "iter_4.pth"

    without = Runner.from_cfg(_config(tmp_path / "off", default_hooks=dict(checkpoint=None)))
    assert without.checkpointer.schedule is None and without.checkpointer.best() is None
    path = without.checkpointer.save_at_stop(0)
    assert path.endswith("iter_0.pth") and load_checkpoint(path)["meta"]["iter"] == 0


def test_the_adapters_key_hooks_and_list_states():
    class Stateful(Hook):
        def __init__(self, v):
            self.v = v

        def state_dict(self):
            return {"v": self.v}

        def load_state_dict(self, state):
            self.v = state["v"]

    hooks = [Stateful(1), Hook(), Stateful(2)]
    states = HookStates(lambda: hooks)
    assert states.state_dict() == {"Stateful": {"v": 1}, "Stateful#2": {"v": 2}}
    states.load_state_dict({"Stateful#2": {"v": 5}, "Gone": {}})
    assert hooks[2].v == 5 and hooks[0].v == 1

    counters = [Counter(), Counter()]
    StateList(counters).load_state_dict([{"n": 3}, {"n": 4}])
    assert StateList(counters).state_dict() == [{"n": 3}, {"n": 4}]


def test_resuming_a_finished_run_says_so(tmp_path, libai_log):
    """--resume of a run that already reached max_iters: one line says nothing is left to train
    and what happens instead (issue 27)."""
    Runner.from_cfg(_config(tmp_path)).train()
    again = Runner.from_cfg(_config(tmp_path, resume=True))
    again.train()
    said = [m for m in libai_log if "is the end of this training" in m]
    assert len(said) == 1 and "iteration 4 of 4" in said[0] and "--allow-changes" in said[0]
    assert again.iter == 4
