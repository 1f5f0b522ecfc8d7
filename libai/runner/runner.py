"""The Runner: assembles the parts of a run from a config and drives train / val / test.

What it assumes: a config with the keys in ``build.TOP_LEVEL_KEYS``; a model following the contract
in ``libai/model/contract.py``. Escape hatches: a custom loop (``train_cfg=dict(type='MyLoop')``), a
custom ``train_step`` on the model, hooks for side work, or your own loop calling the parts directly.

What hooks and loops may use of it is declared in :class:`libai.hooks.hook.RunnerView` and
:class:`libai.loops.base.LoopRunner`; the checkpoints are :class:`libai.checkpoint.Checkpointer`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial, wraps
from typing import Any

from torch import nn

from libai.checkpoint.checkpointer import Checkpointer, HookStates, OptimizerState, StateList
from libai.hooks.hook import Hook, StageIndex, get_priority
from libai.model import test_step as default_eval_step
from libai.parallel import parse_parallel
from libai.registry import RUNNERS
from libai.utils import dist
from libai.utils.errors import ConfigError, LibaiError
from libai.utils.message_hub import MessageHub

from . import batch_fit, build, env, imports, preemption
from .data_check import check_data_files, model_with_classes
from .distribute import build_model, prepare_model
from .preflight import check_model_type, check_watched_metrics, preflight

__all__ = ["Runner"]


def _refusal_leaves_nothing(method: Callable) -> Callable:
    """A refusal (a ``LibaiError`` that is no orderly stop) before the training or evaluation
    loop starts takes back the run folder it made: a refused run writes nothing
    (docs/reliability.md).
    Applied to the entry points; only the outermost call of a nesting acts."""
    @wraps(method)
    def call(self: Runner, *args: Any, **kwargs: Any) -> Any:
        outer = not self.__dict__.get("_in_entry_point", False)
        self._in_entry_point = True
        try:
            return method(self, *args, **kwargs)
        except LibaiError as e:
            if outer and getattr(e, "exit_status", None) is None:
                self._leave_nothing()
            raise
        finally:
            if outer:
                self._in_entry_point = False
    return call


@RUNNERS.register_module()
class Runner:
    """Builds everything from ``cfg`` (lazily: a test-only run never builds the optimizer).

    Args:
        cfg: A :class:`libai.config.Config` or a plain dict. It is validated and frozen.
        fast_dev_run: Run only this many train iterations and eval batches, save nothing.
            Defaults to 0 (off).
    """

    @_refusal_leaves_nothing
    def __init__(self, cfg: Any, fast_dev_run: int = 0) -> None:
        from libai.config import Config
        from libai.hooks import DEFAULT_HOOKS, CheckpointHook

        cfg = cfg if isinstance(cfg, Config) else Config(dict(cfg))
        build.validate_top_level(cfg)
        preflight(cfg, fast_dev_run)
        imports.import_custom_modules(cfg.get("custom_imports"), cfg.filename)
        check_model_type(cfg)
        # every split's files and the class count, before anything is written or built
        data_meta = check_data_files(cfg)
        model_cfg = model_with_classes(cfg.get("model"), data_meta)
        derived = model_cfg is not cfg.get("model")  # num_classes taken from the labels
        cfg.freeze()
        self.cfg = cfg
        self.fast_dev_run = int(fast_dev_run)
        self.should_stop = False
        self.message_hub = MessageHub()
        self._stop_request = preemption.build_stop_request(cfg)
        self.stop_request = None  # the installed StopRequest while train() runs; loops poll it

        env.init_distributed(dict(cfg.get("env_cfg") or {}))
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.parallel = parse_parallel(cfg.get("parallel"), self.world_size)  # before any file
        # which share of the data this process reads: passed to the loaders, metrics, train step
        # and hooks (tensor-parallel peers share one)
        self.data_parallel = self.parallel.data_parallel(self.rank)
        self.device = env.select_device(cfg.get("device"))
        # the micro-batch and accumulation the device takes (micro_batch=...): logged, not written back
        self.batch_fit = batch_fit.resolve(cfg, self.device, self.data_parallel.size)
        randomness = dict(cfg.get("randomness") or {})
        self.seed = env.seed_everything(randomness, rank=self.data_parallel.rank)
        self._diff_rank_seed = bool(randomness.get("diff_rank_seed"))
        self.work_dir = os.path.abspath(cfg.get("work_dir") or "work_dirs/default")
        self.experiment_name = cfg.get("experiment_name") or env.config_name(cfg)
        self._new_folders = env.new_folders(self.work_dir)  # what a refusal may take back
        # one run at a time in a work dir: held by this runner until it is collected or we exit
        self._work_dir_lock = env.lock_work_dir(self.work_dir, self.fast_dev_run > 0)
        # a dry run's folder is a temporary one: it leaves the work dir as it was
        self.timestamp, self.log_dir, self.logger, config_text = env.open_run(
            cfg, self.work_dir, self.fast_dev_run > 0, self.device, self.seed, self.rank)
        if self.batch_fit is not None:
            self.logger.info(self.batch_fit.summary())

        if derived:  # logged, not written into the config
            self.logger.info(f"model.num_classes={model_cfg['num_classes']}: the labels of "
                             f"{data_meta['section']}")
        self.unwrapped_model = build_model(cfg, self.parallel, self.device,
                                           same_seed=not self._diff_rank_seed,
                                           model_cfg=model_cfg if derived else None)
        # what the model became (DDP, FSDP, pipeline stages, compiled), said once: the optimizer
        # wrapper, the train step, the checkpointer and the hooks read this record
        self.execution = prepare_model(cfg, self.unwrapped_model, self.parallel, self.device,
                                       self.logger)
        self.model = self.execution.model
        self.hooks = build.build_hooks(DEFAULT_HOOKS, cfg.get("default_hooks"), cfg.get("custom_hooks"))
        if self.fast_dev_run:  # a dry run saves nothing
            self.hooks = [h for h in self.hooks if not isinstance(h, CheckpointHook)]
        self.stage_index = StageIndex(self.hooks)
        self.logger.info(self.stage_index.summary())
        self.logger.debug(self.stage_index.order_text())
        self.checkpointer = Checkpointer(
            self.work_dir, self.model, self.unwrapped_model, cfg=cfg, logger=self.logger,
            call_hook=self.call_hook, meta={"seed": self.seed, "experiment_name": self.experiment_name,
                  "data_shares": self.data_parallel.size,
                  # what batch_size='auto' became: a resume on another GPU must not change it
                  **({"batch_fit": [self.batch_fit.micro, self.batch_fit.accumulation]}
                     if self.batch_fit else {})},
            series_dir=self.log_dir, config_text=config_text, dry_run=self.fast_dev_run > 0,
            execution=self.execution)
        # the shared services hooks use, assembled here (and in register_hook) and nowhere else
        self.writer, self.checkpointer.schedule = build.hook_services(self.hooks)
        self.checkpointer.track(message_hub=self.message_hub, hooks=HookStates(lambda: self.hooks))
        self._optim_wrapper = self._param_schedulers = None
        self._train_step = self._eval_step = self._train_loop = None
        self._loops: dict[str, Any] = {}

    @classmethod
    def from_cfg(cls, cfg: Any, **kwargs: Any) -> Runner:
        """Build a runner from a Config or dict (see the class docstring)."""
        return cls(cfg, **kwargs)

    @property
    def series_dir(self) -> str:
        """The run folder training writes its scalars to: this run's, or after a resume the one
        of the checkpoint's series."""
        return self.checkpointer.series_dir

    # ------------------------------------------------------------------------- parts
    @property
    @_refusal_leaves_nothing
    def train_loop(self) -> Any:
        if self._train_loop is None:
            if self.cfg.get("train_dataloader") is None or self.cfg.get("train_cfg") is None:
                raise ConfigError("Training needs 'train_dataloader' and 'train_cfg' in the config.")
            loader = self._build_loader(batch_fit.loader_cfg(self.cfg.train_dataloader, self.batch_fit),
                                        "train_dataloader")
            self._train_loop = build.build_loop(self.cfg.train_cfg, "IterBasedTrainLoop", "train_cfg",
                                                runner=self, dataloader=loader)
        return self._train_loop

    @property
    def train_dataloader(self) -> Any:
        return self.train_loop.dataloader

    @property
    @_refusal_leaves_nothing
    def val_loop(self) -> Any:
        return self._eval_loop("val")

    @property
    @_refusal_leaves_nothing
    def test_loop(self) -> Any:
        return self._eval_loop("test")

    def _eval_loop(self, stage: str) -> Any:
        if stage not in self._loops:
            self._loops[stage] = build.build_eval_loop(self.cfg, stage, self._build_loader, self)
        return self._loops[stage]

    def _build_loader(self, cfg: Any, section: str) -> Any:
        loader = build.build_loader(cfg, section, self.seed, self.data_parallel, self._diff_rank_seed)
        build.check_model_fits_data(self.unwrapped_model, loader, section)
        meta = build.dataset_meta(loader)
        if section == "train_dataloader" and meta:  # the label names travel with the weights
            self.checkpointer.meta["dataset_meta"] = meta
        return loader

    @property
    def optim_wrapper(self) -> Any:
        if self._optim_wrapper is None:
            from libai.optim import build_optim_wrapper

            if self.cfg.get("optim_wrapper") is None:
                raise ConfigError("Training needs 'optim_wrapper', e.g. optim_wrapper=dict("
                                  "optimizer=dict(type='AdamW', lr=1e-3)).")
            from libai.model.graph import graph_options
            from libai.optim.graph_optim_wrapper import compiled_wrapper_cfg

            cfg = batch_fit.optim_cfg(self.cfg.optim_wrapper, self.batch_fit)
            if self.execution.compiled:  # compile=...: the update compiled too
                cfg = compiled_wrapper_cfg(cfg, graph_options(self.cfg))
            self._optim_wrapper = build_optim_wrapper(self.unwrapped_model, cfg)
            self._optim_wrapper.bind(self.execution, self.data_parallel)
            if "after_backward" in self.stage_index.methods:
                self._optim_wrapper.register_after_backward(lambda: self.call_hook("after_backward"))
        return self._optim_wrapper

    @property
    def param_schedulers(self) -> list:
        if self._param_schedulers is None:
            from libai.optim import build_param_schedulers

            cfg = self.cfg.get("param_scheduler") or []
            cfg = [cfg] if isinstance(cfg, dict) else list(cfg)
            loop = self.train_loop
            self._param_schedulers = build_param_schedulers(
                cfg, self.optim_wrapper.optimizer, max_iters=loop.max_iters,
                epoch_length=loop.iters_per_epoch)
        return self._param_schedulers

    # ----------------------------------------------------------------- loop position
    @property
    def iter(self) -> int:
        """Iterations done; without training, those of the checkpoint ``load_from`` loaded."""
        return self._train_loop.iter if self._train_loop is not None else self.checkpointer.loaded_iter

    @property
    def epoch(self) -> int:
        return self._train_loop.epoch if self._train_loop is not None else 0

    @property
    def max_iters(self) -> int:
        return self.train_loop.max_iters

    @property
    def max_epochs(self) -> int | None:
        return self.train_loop.max_epochs

    def limit_iters(self, max_iters: int) -> int:
        """Iterations a train loop really runs (fewer under ``fast_dev_run``)."""
        return min(max_iters, self.iter + self.fast_dev_run) if self.fast_dev_run else max_iters

    def limit_batches(self, num_batches: int) -> int:
        """Batches an eval loop really runs (fewer under ``fast_dev_run``)."""
        return min(num_batches, self.fast_dev_run) if self.fast_dev_run else num_batches

    # ------------------------------------------------------------------------- steps
    def run_train_step(self, data: Any) -> dict:
        """One training step; the model's own ``train_step`` wins over the default."""
        return self.train_step_fn()(data, self._optim_wrapper or self.optim_wrapper)

    def train_step_fn(self) -> Callable[[Any, Any], dict]:
        """What ``run_train_step`` calls: ``step(data, optim_wrapper)`` returning the values to
        log. The train loops hold it for the run, saving a call per iteration."""
        if self._train_step is None:
            self._train_step = build.build_train_step(
                self.execution, self.device, self.data_parallel, self.parallel.tensor > 1,
                self.logger)
        return self._train_step

    def run_eval_step(self, data: Any) -> Any:
        """One evaluation step; the model's own ``val_step`` wins over the default."""
        if self._eval_step is None:
            own = getattr(self.unwrapped_model, "val_step", None)
            self._eval_step = own or partial(default_eval_step, self.unwrapped_model, device=self.device)
        return self._eval_step(data, forward=self.model)

    # ------------------------------------------------------------------------- hooks
    @property
    def stage_methods(self) -> dict[str, tuple]:
        """``{stage: bound hook methods}``: the loops call the per-iteration stages from it."""
        return self.stage_index.methods

    def call_hook(self, stage: str, **kwargs: Any) -> None:
        """Call ``stage`` on every hook that overrides it, in priority order."""
        for method in self.stage_index.methods.get(stage, ()):
            method(self, **kwargs)

    def register_hook(self, hook: Any, priority: int | str | None = None) -> None:
        """Add a built hook (before ``train``/``val``/``test``), placed by its priority after the
        hooks of equal priority; ``priority`` (a name or an int) overrides the hook's own."""
        if not isinstance(hook, Hook):
            raise ConfigError(f"register_hook takes a Hook instance, got {type(hook).__name__}; "
                              f"build it first, or list its config under custom_hooks.")
        hook.priority = get_priority(hook.priority if priority is None else priority)
        self.hooks = sorted([*self.hooks, hook], key=lambda h: h.priority)  # stable: ties keep order
        self.stage_index = StageIndex(self.hooks)
        self.writer, self.checkpointer.schedule = build.hook_services(self.hooks)

    # ------------------------------------------------------------------- entry points
    @_refusal_leaves_nothing
    def train(self) -> nn.Module:
        """Train as ``train_cfg`` says, validating on the way; returns the trained model.

        Raises:
            Preempted: a signal named by the ``preemption`` key stopped training; the checkpoint
                of the stop iteration is written (docs/reliability.md).
        """
        try:
            return preemption.guarded(self, self._stop_request, self._train)
        finally:
            self.close()  # training is over: the work dir is free for the next run

    def stop_on_signal(self, signum: int, val_interrupted: bool = False) -> None:
        """Called by the train loop on every rank when a stop signal is agreed on: save the
        current iteration, log one line, raise :class:`~libai.utils.signals.Preempted`."""
        preemption.stop_on_signal(self, signum, val_interrupted)

    def _train(self) -> nn.Module:
        self.optim_wrapper  # noqa: B018 - first: a bad optimizer setting fails before the data loads
        loop = self.train_loop
        self.checkpointer.track(**loop.checkpoint_parts(),  # before resume loads them
                                optimizer=OptimizerState(self.optim_wrapper, self.unwrapped_model,
                                                         self.execution.sharded),
                                param_schedulers=StateList(self.param_schedulers))
        self.logger.info(env.derived_summary(loop, self.optim_wrapper, self.data_parallel))
        schedule = self.execution.schedule  # a pipeline: its microbatches
        if schedule is not None and getattr(loop.dataloader, "batch_size", None):
            self.logger.info(schedule.describe_step(loop.dataloader.batch_size))
        self.logger.info(f"Optimizer: {self.optim_wrapper!r}")
        self.call_hook("before_run")
        try:
            self.checkpointer.restore()
            check_watched_metrics(self)
            self.optim_wrapper.initialize_count_status(self.model, loop.iter, loop.max_iters)
            self._started = True  # from here on an error ends a run: its folder stays
            loop.run()
            self.checkpointer.wait()
        finally:
            graph = self.execution.graph
            if graph is not None and graph.train_calls:
                self.logger.info(graph.report(final=True))
            try:
                self.call_hook("after_run")
            finally:
                self.checkpointer.close()
        return self.unwrapped_model

    def close(self) -> None:
        """Give the work dir back to other runs (its lock, taken when the runner was built).
        Done at the end of ``train``, ``val`` and ``test`` (after an error too), when the runner
        is collected and when the process ends; the runner can still be read."""
        if self._work_dir_lock is not None:
            self._work_dir_lock.release()

    def _leave_nothing(self) -> None:
        """Take back what a run refused before its loop started wrote: its run folder,
        then (the lock given back) the folders it created, when empty. Once."""
        if "log_dir" not in self.__dict__ or self.__dict__.get("_started") or self.fast_dev_run:
            return  # no folder yet, a run that did work, or a dry run's temporary folder
        self._started = True  # once: nothing is left to take back
        env.remove_run_folder(self.log_dir, self.logger)
        self.close()
        env.remove_empty_folders(self._new_folders)

    def val(self) -> dict[str, float]:
        """Validate once; returns the metrics."""
        return self._evaluate("val")

    def test(self) -> dict[str, float]:
        """Test once; returns the metrics."""
        return self._evaluate("test")

    @_refusal_leaves_nothing
    def _evaluate(self, stage: str) -> dict[str, float]:
        loop = self._eval_loop(stage)
        if loop is None:
            raise ConfigError(f"{stage}() needs '{stage}_dataloader' and '{stage}_evaluator' in the config.")
        self.call_hook("before_run")
        try:
            self.checkpointer.restore(weights_only=True)
            self._started = True
            return loop.run()
        finally:
            try:
                self.call_hook("after_run")
            finally:
                self.close()
