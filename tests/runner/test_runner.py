import os

import pytest
import torch
from torch.utils.data import DataLoader

from libai.config import Config
from libai.data import DefaultSampler
from libai.hooks import Hook
from libai.registry import DATASETS, HOOKS, LOOPS
from libai.runner import Runner
from libai.testing import ToyDataset, ToyModel, toy_config
from libai.utils.errors import (
    BuildError,
    CheckpointError,
    ConfigError,
    RegistryError,
    TrainingError,
)

QUIET = dict(logger=dict(interval=5, progress_bar=False, plot=False))


def make(tmp_path, **overrides):
    overrides.setdefault("default_hooks", QUIET)
    return Runner.from_cfg(toy_config(work_dir=str(tmp_path), **overrides))


def test_unknown_top_level_key_is_refused_with_suggestion(tmp_path):
    cfg = toy_config(work_dir=str(tmp_path))
    cfg["param_schedular"] = [dict(type="ConstantLR")]
    with pytest.raises(ConfigError) as exc:
        Runner.from_cfg(cfg)
    assert "Unknown top-level config key 'param_schedular'" in str(exc.value)
    assert "Did you mean 'param_scheduler'?" in str(exc.value)


def test_helper_variables_with_underscore_are_allowed(tmp_path):
    cfg = toy_config(work_dir=str(tmp_path))
    cfg["_batch"] = 8
    Runner.from_cfg(cfg)


def test_unknown_model_type_suggests(tmp_path):
    with pytest.raises(RegistryError, match="Did you mean 'ToyModel'"):
        make(tmp_path, model=dict(type="ToyModle"))


def test_bad_model_argument_names_path(tmp_path):
    with pytest.raises(BuildError, match="at 'model' got an unexpected argument 'hiden'"):
        make(tmp_path, model=dict(hiden=4))


def test_test_only_run_never_builds_the_optimizer(tmp_path):
    runner = make(tmp_path, test_dataloader=toy_config()["val_dataloader"],
                  test_evaluator=dict(type="Accuracy"), test_cfg=dict(type="TestLoop"),
                  optim_wrapper=dict(optimizer=dict(type="NoSuchOptimizer")))
    metrics = runner.test()
    assert set(metrics) == {"test/accuracy", "test/loss"}
    assert runner._optim_wrapper is None and runner._train_loop is None


def test_train_writes_run_folder_and_config_is_frozen(tmp_path):
    runner = make(tmp_path)
    runner.train()
    run_dir = runner.log_dir
    assert os.path.dirname(run_dir) == str(tmp_path)
    assert os.path.exists(os.path.join(run_dir, f"{runner.timestamp}.log"))
    log = open(os.path.join(run_dir, f"{runner.timestamp}.log")).read()
    assert "Environment:" in log and "torch" in log and "Derived: iterations per epoch 8" in log
    # one line at INFO, the table per stage only at DEBUG (issue 27)
    assert "Hooks, in priority order: NonFiniteLossHook(0), RuntimeInfoHook(10)," in log
    assert "Hooks, in call order per stage:" not in log
    debug = make(tmp_path / "debug", log_level="DEBUG")
    with open(os.path.join(debug.log_dir, f"{debug.timestamp}.log")) as f:
        assert "Hooks, in call order per stage:" in f.read()
    dumped = Config.fromfile(os.path.join(run_dir, "config.py"))
    assert dumped.to_dict() == runner.cfg.to_dict()
    with pytest.raises(ConfigError, match="read-only"):
        runner.cfg.train_cfg.max_iters = 3
    assert runner.iter == 20


def plain_training(iters, lr=0.1, momentum=0.9, batch_size=8, device="cpu"):
    torch.manual_seed(0)
    model = ToyModel(in_features=8, num_classes=2).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    dataset = ToyDataset(num_samples=64, seed=0)
    sampler = DefaultSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    done, epoch = 0, 0
    while done < iters:
        sampler.set_epoch(epoch)
        for batch in loader:
            model({k: v.to(device) for k, v in batch.items()})["loss"].backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == iters:
                break
        epoch += 1
    return model.state_dict()


@pytest.mark.parametrize("device", ["cpu", "auto"])
@pytest.mark.parametrize("loop", ["iter", "epoch"])
def test_runner_changes_no_math(tmp_path, loop, device, test_device):
    """Same seed and data order: the Runner and a hand-written loop on the same device end
    bit-identical on the CPU (device="cpu", on every machine), within float32's last bits on
    CUDA (device="auto" where there is a GPU)."""
    train_cfg = (dict(type="IterBasedTrainLoop", max_iters=20, val_interval=10) if loop == "iter"
                 else dict(type="EpochBasedTrainLoop", max_epochs=3))
    runner = make(tmp_path, train_cfg=train_cfg, device=device,
                  optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.1, momentum=0.9)))
    model = runner.train()
    assert runner.device.type == ("cpu" if device == "cpu" else test_device.type)
    expected = plain_training(20 if loop == "iter" else 24, device=runner.device)
    # CUDA's kernels may pick other algorithms (and atomics) for the same products from one call
    # to the next unless deterministic algorithms are asked for: the last bits of 20 SGD steps
    tol = dict(atol=0, rtol=0) if runner.device.type == "cpu" else dict(atol=1e-6, rtol=1e-5)
    for key, value in expected.items():
        torch.testing.assert_close(model.state_dict()[key], value, **tol, msg=key)


def test_accumulation_matches_larger_batch(tmp_path):
    """k micro-batches with accumulation k give the update of one batch k times larger."""
    small = make(tmp_path / "a", optim_wrapper=dict(optimizer=dict(type="SGD", lr=0.1),
                                                    accumulative_counts=2),
                 train_dataloader=dict(batch_size=4, sampler=dict(type="DefaultSampler", shuffle=False)),
                 train_cfg=dict(max_iters=16))
    big = make(tmp_path / "b", train_dataloader=dict(batch_size=8, sampler=dict(type="DefaultSampler", shuffle=False)),
               train_cfg=dict(max_iters=8))
    a, b = small.train().state_dict(), big.train().state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)


class Recorder(Hook):
    def __init__(self):
        self.calls = []

    def _rec(self, name):
        self.calls.append(name)


for _stage in ("before_run", "before_train", "before_train_epoch", "before_train_iter",
               "after_backward", "after_train_iter", "after_train_epoch", "before_val",
               "before_val_epoch", "after_val_epoch", "after_val", "after_train", "after_run",
               "before_save_checkpoint"):
    setattr(Recorder, _stage, (lambda s: lambda self, runner, **kw: self._rec(s))(_stage))


def test_hook_call_order(tmp_path):
    runner = make(tmp_path, train_cfg=dict(max_iters=4, val_interval=2), custom_hooks=[Recorder()],
                  default_hooks=dict(QUIET, checkpoint=None))
    runner.train()
    rec = next(h for h in runner.hooks if isinstance(h, Recorder))
    it = ["before_train_iter", "after_backward", "after_train_iter"]
    val = ["before_val", "before_val_epoch", "after_val_epoch", "after_val"]
    assert rec.calls == (["before_run", "before_train", "before_train_epoch"] + it * 2 + val
                         + it * 2 + val + ["after_train_epoch", "after_train", "after_run"])


def test_hook_priority_and_disabling_defaults(tmp_path):
    @HOOKS.register_module(force=True)
    class FirstHook(Hook):
        priority = "VERY_LOW"

    runner = make(tmp_path, default_hooks=dict(QUIET, checkpoint=None, nonfinite=None),
                  custom_hooks=[dict(type="FirstHook", priority="HIGHEST")])
    names = [type(h).__name__ for h in runner.hooks]
    assert names[0] == "FirstHook"
    assert "CheckpointHook" not in names and "NonFiniteLossHook" not in names
    with pytest.raises(ConfigError, match="Did you mean 'checkpoint'"):
        make(tmp_path, default_hooks=dict(checkpont=None))


def test_a_stage_disabled_during_training_is_no_longer_called(tmp_path):
    class OnlyTwice(Hook):
        def __init__(self):
            self.calls = 0

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            self.calls += 1

        def after_val(self, runner, metrics=None):
            self.disable_stage("after_train_iter")  # takes effect from the next stage call

    runner = make(tmp_path, train_cfg=dict(max_iters=6, val_interval=2), custom_hooks=[OnlyTwice()])
    runner.train()
    assert next(h for h in runner.hooks if isinstance(h, OnlyTwice)).calls == 2
    # no schedulers: ParamSchedulerHook dropped its per-iteration stage in before_train
    assert "ParamSchedulerHook" not in [type(m.__self__).__name__
                                        for m in runner.stage_methods.get("before_train_iter", ())]


def test_register_hook_places_a_built_hook_by_priority(tmp_path):
    runner = make(tmp_path, train_cfg=dict(max_iters=2, val_interval=10))
    late, early = Recorder(), Recorder()
    runner.register_hook(late)  # NORMAL: after the NORMAL default hooks
    runner.register_hook(early, priority="HIGHEST")
    names = [type(h).__name__ for h in runner.hooks]
    assert runner.hooks.index(early) < names.index("RuntimeInfoHook")  # HIGHEST (0) < VERY_HIGH
    assert names.index("IterTimerHook") < runner.hooks.index(late)
    assert runner.hooks.index(late) < names.index("LoggerHook")  # NORMAL < LOW
    runner.train()
    assert late.calls.count("after_train_iter") == 2 and early.calls[0] == "before_run"
    with pytest.raises(ConfigError, match="register_hook takes a Hook instance.*custom_hooks"):
        runner.register_hook(dict(type="EMAHook"))


def test_custom_loop_selected_by_type(tmp_path):
    @LOOPS.register_module(force=True)
    class CountingLoop(LOOPS.get("IterBasedTrainLoop")):
        ran = 0

        def run(self):
            type(self).ran += 1
            super().run()

    make(tmp_path, train_cfg=dict(type="CountingLoop", max_iters=3, val_interval=10)).train()
    assert CountingLoop.ran == 1


def test_several_validation_sets_are_prefixed(tmp_path):
    cfg = toy_config(work_dir=str(tmp_path), default_hooks=QUIET)
    val = cfg["val_dataloader"]
    cfg["val_dataloader"] = dict(clean=val, other=dict(val, batch_size=4))
    runner = Runner.from_cfg(cfg)
    metrics = runner.val()
    assert set(metrics) == {"val/clean/accuracy", "val/clean/loss", "val/other/accuracy", "val/other/loss"}
    assert metrics["val/clean/accuracy"] == metrics["val/other/accuracy"]


def test_fast_dev_run_trains_two_iterations_and_saves_nothing(tmp_path):
    cfg = toy_config(work_dir=str(tmp_path), default_hooks=QUIET)
    runner = Runner.from_cfg(cfg, fast_dev_run=2)
    runner.train()
    assert runner.iter == 2
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".pth")]


def test_amp_bfloat16_on_cpu(tmp_path):
    runner = make(tmp_path, train_cfg=dict(max_iters=6, val_interval=3),
                  optim_wrapper=dict(type="AmpOptimWrapper", dtype="bfloat16",
                                     optimizer=dict(type="SGD", lr=0.1)))
    before = {k: v.clone() for k, v in runner.unwrapped_model.state_dict().items()}
    model = runner.train()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_non_finite_loss_stops_with_iteration(tmp_path):
    runner = make(tmp_path, optim_wrapper=dict(optimizer=dict(type="SGD", lr=1e30)),
                  train_cfg=dict(max_iters=50, val_interval=100))
    with pytest.raises(TrainingError) as exc:
        runner.train()
    assert "iteration" in str(exc.value).lower() and "loss" in str(exc.value)


def test_model_returning_no_loss_is_explained(tmp_path):
    class NoLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(1))

        def forward(self, batch):
            return {"logits": self.w * batch["inputs"].sum()}

    runner = make(tmp_path, model=NoLoss())
    with pytest.raises(TrainingError, match="none of which contains 'loss'"):
        runner.train()


def test_resume_continues_exactly(tmp_path):
    straight = make(tmp_path / "a", train_cfg=dict(max_iters=12, val_interval=100)).train()
    first = make(tmp_path / "b", train_cfg=dict(max_iters=12, val_interval=100),
                 default_hooks=dict(QUIET, checkpoint=dict(interval=5)))
    first.fast_dev_run = 7  # stop after 7 of 12 iterations, as if killed
    first.train()
    assert first.iter == 7
    resumed = make(tmp_path / "b", train_cfg=dict(max_iters=12, val_interval=100), resume=True)
    model = resumed.train()
    assert resumed.iter == 12
    for key, value in straight.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


def test_load_from_with_remap_and_report(tmp_path):
    first = make(tmp_path / "a", train_cfg=dict(max_iters=4, val_interval=100))
    first.train()
    ckpt = os.path.join(first.work_dir, "iter_4.pth")
    runner = make(tmp_path / "b", load_from=dict(path=ckpt, strict=True))
    metrics = runner.val()
    assert metrics["val/accuracy"] == first.val()["val/accuracy"]

    class Renamed(torch.nn.Module):  # same tensors under another prefix
        def __init__(self):
            super().__init__()
            self.body = ToyModel(in_features=8, num_classes=2).net

        def forward(self, batch):
            return {"logits": self.body(batch["inputs"])}

    with pytest.raises(CheckpointError, match="body"):
        make(tmp_path / "c", model=Renamed(), load_from=ckpt).val()
    runner = make(tmp_path / "d", model=Renamed(), load_from=dict(path=ckpt, remap={"net.": "body."}))
    runner.val()
    for key, value in first.unwrapped_model.net.state_dict().items():
        assert torch.equal(runner.unwrapped_model.body.state_dict()[key], value)


def test_resume_refuses_schedule_changes_unless_allowed(tmp_path):
    make(tmp_path, train_cfg=dict(max_iters=6, val_interval=100),
         default_hooks=dict(QUIET, checkpoint=dict(interval=3))).train()
    with pytest.raises(ConfigError) as exc:
        make(tmp_path, train_cfg=dict(max_iters=9, val_interval=100), resume=True).train()
    msg = str(exc.value)
    assert "train_cfg.max_iters: 6 in the checkpoint, 9 now" in msg
    assert "allow_changes=['train_cfg.max_iters']" in msg
    runner = make(tmp_path, train_cfg=dict(max_iters=9, val_interval=100), resume=True,
                  resume_options=dict(allow_changes=["train_cfg.max_iters"]))
    runner.train()
    assert runner.iter == 9
    log = open(os.path.join(runner.log_dir, f"{runner.timestamp}.log")).read()
    assert "train_cfg.max_iters: 6 -> 9  (allowed)" in log
    assert "From the checkpoint: model weights" in log


def test_compile_key_compiles_the_forward_of_the_same_model(tmp_path):
    """compile=... is a config switch: same model code, same checkpoint keys, close results.
    (Graph mode proper, GraphOptimWrapper with inductor: tests/optim/test_graph_mode.py.)"""
    torch._dynamo.reset()
    eager = make(tmp_path / "eager", train_cfg=dict(max_iters=4, val_interval=2)).train()
    runner = make(tmp_path / "graph", train_cfg=dict(max_iters=4, val_interval=2),
                  compile=dict(backend="aot_eager"))
    assert runner.model is not runner.unwrapped_model  # the compiled wrapper
    graph = runner.train()
    for key, value in eager.state_dict().items():
        torch.testing.assert_close(graph.state_dict()[key], value, rtol=1e-4, atol=1e-5)
    ckpt = torch.load(os.path.join(runner.work_dir, "iter_4.pth"))
    assert set(ckpt["state_dict"]) == set(eager.state_dict())  # no _orig_mod. prefix


def test_compile_and_graph_optim_wrapper_together_is_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="both ask for graph mode: remove compile"):
        make(tmp_path, compile=True, optim_wrapper=dict(type="GraphOptimWrapper"))


@pytest.mark.parametrize("loop", ["iter", "epoch"])
def test_resume_from_a_periodic_checkpoint_saved_inside_an_iteration(tmp_path, loop):
    """CheckpointHook saves in after_train_iter: that iteration's step counts as done."""
    train_cfg = (dict(type="IterBasedTrainLoop", max_iters=12, val_interval=100) if loop == "iter"
                 else dict(type="EpochBasedTrainLoop", max_epochs=2, val_interval=100))
    n = 12 if loop == "iter" else 16
    straight = make(tmp_path / "a", train_cfg=train_cfg).train()
    make(tmp_path / "b", train_cfg=train_cfg,
         default_hooks=dict(QUIET, checkpoint=dict(interval=5, save_last=False))).train()
    ckpt = torch.load(tmp_path / "b" / "iter_5.pth")
    assert ckpt["loop"]["iter"] == 5 and ckpt["loop"]["batch_in_epoch"] == 5
    assert ckpt["meta"]["iter"] == 5
    resumed = make(tmp_path / "c", train_cfg=train_cfg, resume=str(tmp_path / "b" / "iter_5.pth"))
    model = resumed.train()
    assert resumed.iter == n
    for key, value in straight.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


class _TextLikeDataset(ToyDataset):
    def __init__(self):
        super().__init__()
        self.metainfo = {"vocab_size": 100, "max_seq_length": 64, "tokenizer": "vocab.txt"}


def test_model_and_data_must_agree_on_vocabulary_and_length(tmp_path):
    class TextLikeModel(ToyModel):
        def __init__(self, vocab_size, max_position_embeddings):
            super().__init__()
            self.vocab_size, self.max_position_embeddings = vocab_size, max_position_embeddings

    def loader():
        return dict(dataset=_TextLikeDataset(), batch_size=4)

    runner = make(tmp_path, model=TextLikeModel(120, 512), train_dataloader=loader())
    with pytest.raises(ConfigError) as exc:
        _ = runner.train_loop
    assert str(exc.value).startswith(
        "model.vocab_size=120 but the tokenizer of train_dataloader.dataset (vocab.txt) has 100 "
        "tokens: set model.vocab_size=100")
    runner = make(tmp_path, model=TextLikeModel(100, 32), train_dataloader=loader())
    with pytest.raises(ConfigError, match="sequences of 64 tokens but the model has only "
                                          "max_position_embeddings=32"):
        _ = runner.train_loop
    assert make(tmp_path, model=TextLikeModel(100, 64), train_dataloader=loader()).train_loop


def test_a_watched_metric_is_looked_up_before_training(tmp_path):
    # a typo in save_best used to surface at the first validation, after a training interval
    hooks = dict(QUIET, checkpoint=dict(interval=10, save_best="val/acuracy", rule="greater"))
    runner = make(tmp_path / "typo", default_hooks=hooks)
    with pytest.raises(ConfigError) as e:
        runner.train()
    assert "checked before training" in str(e.value) and "Did you mean 'val/accuracy'" in str(e.value)
    assert runner.iter == 0 and not (tmp_path / "typo").exists()  # a refused run writes nothing
    # the look-up changes no number of the run: its RNG states are put back (here the
    # validation data draws noise from the global RNG, and dropout draws from it in training)
    @DATASETS.register_module(force=True)
    class NoisyValDataset(torch.utils.data.Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            return {"inputs": torch.randn(8), "labels": torch.tensor(i % 2)}

    parts = dict(model=dict(type="DigitsMLP", in_features=8, hidden=16, num_classes=2,
                            dropout=0.5),
                 val_dataloader=dict(dataset=dict(type="NoisyValDataset")))
    watched = make(tmp_path / "a", **parts, default_hooks=dict(QUIET, checkpoint=dict(
        interval=10, save_best="val/accuracy"))).train().state_dict()
    plain = make(tmp_path / "b", **parts, default_hooks=dict(QUIET, checkpoint=dict(
        interval=10, save_best="auto"))).train().state_dict()
    for key in plain:
        assert torch.equal(watched[key], plain[key]), key


def test_evaluators_named_unlike_the_sets_are_one_line():
    from libai.runner.build import build_eval_sets

    loaders = dict(clean=dict(dataset=dict()), shifted=dict(dataset=dict()))
    evaluators = dict(clean=dict(type="Accuracy"), shiftd=dict(type="Accuracy"))
    with pytest.raises(ConfigError) as e:
        build_eval_sets(loaders, evaluators, "val", lambda cfg, path: object())
    assert "val_evaluator names sets ['clean', 'shiftd'] but val_dataloader has ['clean', " \
           "'shifted']" in str(e.value) and "Did you mean 'shifted'?" in str(e.value)


def test_eval_loss_is_the_mean_over_samples_whatever_the_batches(tmp_path, test_device):
    """10 samples in batches of 4, 4 and 2: val/loss is the mean over the 10 samples (the batch
    losses weighted by the batches' sizes), as HF and Lightning report it, so that it does not
    change with the batch size or the number of processes."""
    import torch.nn.functional as F

    runner = make(tmp_path, val_dataloader=dict(dataset=dict(type="ToyDataset", num_samples=10, seed=0),
                                                batch_size=4))
    loss = runner.val()["val/loss"]
    data = runner.val_loop.sets[None][0].dataset
    model = runner.unwrapped_model.eval()
    inputs = torch.stack([data[i]["inputs"] for i in range(10)]).to(test_device)
    with torch.no_grad():  # on the runner's device (CUDA where there is one), like its eval
        logits = model(dict(inputs=inputs))["logits"]
    labels = torch.tensor([int(data[i]["labels"]) for i in range(10)], device=test_device)
    expected = F.cross_entropy(logits, labels)
    # one batch of 10 against 4 + 4 + 2: float32 sums in another order; CUDA's kernels add more
    rel = 1e-6 if test_device.type == "cpu" else 1e-5
    assert loss == pytest.approx(expected.item(), rel=rel)
