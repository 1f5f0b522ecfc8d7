"""The Checkpointer: saves a whole training run and puts it back, from named stateful parts.

The runner assembles it and hands it its parts; nothing here reaches into the runner::

    ckpt = Checkpointer(work_dir, model, unwrapped_model, cfg=cfg, logger=logger, call_hook=...)
    ckpt.track(message_hub=hub, hooks=HookStates(lambda: hooks))      # from the start
    ckpt.track(**loop.checkpoint_parts(), optimizer=OptimizerState(optim_wrapper, model),
               param_schedulers=StateList(schedulers))
    ckpt.save("iter_100.pth")        # every rank calls it; rank 0 writes the file
    ckpt.restore(weights_only=False)  # resume / load_from, as the config says, once

A part is anything with ``state_dict()`` and ``load_state_dict(state)`` (DCP's ``Stateful``
protocol, :mod:`libai.checkpoint.parts`); its state is stored under its name, and every part is
handled alike. The model is the checkpointer's own: its weights are whole tensors, or DCP shards
under FSDP2 / tensor parallel, and a part that follows its layout says so (the optimizer's
``gather`` and ``shards``). The file format, its safety and the work-dir layout are the rest of
:mod:`libai.checkpoint`; docs/checkpoint.md describes them.

Who calls it: CheckpointHook (periodic, last and best saves), preemption (the save at a stop
signal, :meth:`save_at_stop`), the runner (``restore`` before training or evaluation).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

from torch import nn

from libai.utils import dist
from libai.utils.errors import CheckpointError, ConfigError, LibaiError

from .async_saver import AsyncCheckpointSaver, finish_saves
from .parts import POSITION, RESERVED, HookStates, OptimizerState, Stateful, StateList
from .resume_check import check_resume_config, config_json
from .workdir import find_resumable, run_folder_name, series_to_continue, set_damaged_aside

__all__ = ["Checkpointer", "HookStates", "OptimizerState", "Stateful", "StateList"]


class Checkpointer:
    """Saves and restores a run; see the module docstring.

    Args:
        work_dir: The folder of checkpoints and of the ``latest_checkpoint`` pointer.
        model: The model as trained (possibly wrapped: DDP, compiled); its weights are saved
            without the wrappers' prefixes.
        unwrapped_model: The model itself; weights are loaded into it.
        cfg: The run's config: its text and JSON go into every checkpoint's meta, a resume
            compares them, and ``resume`` / ``load_from`` / ``resume_options`` say what
            :meth:`restore` does.
        logger: Where loads and resumes are reported.
        call_hook: ``call_hook(stage, **kwargs)``: the ``before_save_checkpoint`` and
            ``after_load_checkpoint`` stages are called through it.
        meta: Fixed entries of every checkpoint's meta (seed, experiment name). Defaults to None.
        series_dir: The run folder this training writes its scalars to (its name goes into the
            meta; a resume moves it to the series of the checkpoint). Defaults to None.
        config_text: The config as Python text, when the caller already formatted it.
            Defaults to None (formatted at the first save).
        dry_run: A ``--fast-dev-run``: a resume never continues a scalar series.
        execution: The run's :class:`~libai.model.execution.Execution` record (whether the
            weights are sharded, which modules other processes hold). Defaults to None: sharded
            when the model holds DTensors.
    """

    def __init__(self, work_dir: str, model: nn.Module, unwrapped_model: nn.Module, *, cfg: Any,
                 logger: logging.Logger, call_hook: Callable[..., None], meta: dict | None = None,
                 series_dir: str | None = None, config_text: str | None = None,
                 dry_run: bool = False, execution: Any = None) -> None:
        self.work_dir = work_dir
        self.execution = execution  # the run's record: sharded, the modules held elsewhere
        self.model, self.unwrapped_model = model, unwrapped_model
        self.cfg, self.logger, self.call_hook = cfg, logger, call_hook
        self.meta = dict(meta or {})
        self.series_dir = series_dir
        self.dry_run = dry_run
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.parts: dict[str, Stateful] = {}
        # the save policy (CheckpointHook) when the config has one: a stop signal saves through
        # it, so that the file joins its rotation, and its best checkpoint is reported
        self.schedule: Any = None
        self.loaded_iter = 0  # the training iteration of the checkpoint load_from loaded
        self._config_text = config_text
        self._restored = False
        self._saving_in_background = False  # the last save was asynchronous (same on every rank)
        self._pending_shards: Any = None  # its shards, while they may still be in flight
        self._saver: Any = None

    def track(self, **parts: Stateful) -> None:
        """Add (or replace) named parts: ``loop``, ``sampler``, ``optimizer``,
        ``param_schedulers``, ``message_hub``, ``hooks`` (:mod:`libai.checkpoint.parts`), or any
        other stateful object under a name of your own. A resume loads them in this order."""
        for name, part in parts.items():
            if name in RESERVED or not isinstance(part, Stateful):
                why = (f"'{name}' is a key of the file itself ({', '.join(sorted(RESERVED))})"
                       if name in RESERVED else
                       f"{type(part).__name__} has no state_dict()/load_state_dict(state)")
                raise CheckpointError(f"Checkpointer.track({name}=...): {why}; track a stateful "
                                      f"object under another name.")
        self.parts.update(parts)

    @property
    def config_text(self) -> str:
        """The resolved config as Python text (formatted once: the config is read-only)."""
        if self._config_text is None:
            self._config_text = self.cfg.pretty_text
        return self._config_text

    @property
    def _sharded(self) -> bool:
        from .sharded import is_sharded_model

        if self.execution is not None:
            return self.execution.sharded
        return is_sharded_model(self.unwrapped_model)

    # --------------------------------------------------------------------------- save
    def state(self, meta: dict | None = None, rng: list | None = None) -> dict:
        """Everything needed to continue the run exactly: weights, the parts' states, the loop
        and sampler position, RNG states of every rank, config text and versions.

        Args:
            meta: Extra entries for ``state["meta"]``. Defaults to None.
            rng: The RNG states of every rank, by rank. Defaults to this process's only.
        """
        import torch

        from libai.version import __version__

        from .model_state import model_state_for_saving
        from .rng import get_rng_state

        parts = {name: part.state_dict() for name, part in self.parts.items()}
        position = parts.get(POSITION) or {"iter": 0, "epoch": 0}
        return {
            "meta": {
                "libai_version": __version__,
                "torch_version": str(torch.__version__),
                "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                "iter": position["iter"],
                "epoch": position["epoch"],
                "world_size": self.world_size,
                **self.meta,
                "config": self.config_text,
                "config_json": config_json(self.cfg),
                "run_folder": self._run_folder(),
                **(meta or {}),
            },
            # sharded: the weights are in the shards
            "state_dict": {} if self._sharded else model_state_for_saving(self.model),
            **parts,
            "rng": rng if rng is not None else [get_rng_state()],
        }

    def save(self, filename: str, meta: dict | None = None, asynchronous: bool = False,
             latest: bool = True) -> str:
        """Write a full checkpoint ``work_dir/filename``, then move the latest pointer.

        Every rank must call this: the RNG states of all ranks are gathered. Rank 0 alone builds
        the state, calls the ``before_save_checkpoint`` hooks and writes.

        Args:
            filename: File name inside the work dir.
            meta: Extra entries for ``state["meta"]``. Defaults to None.
            asynchronous: Return once the state is copied to host memory and write it in a
                background thread; the latest pointer moves when the file and its manifest are
                complete, and the next save first waits for this one. Defaults to False.
            latest: Move the latest pointer to it (``--resume`` starts there). Defaults to True;
                CheckpointHook passes False for a best checkpoint no newer than the last one.

        Returns:
            The checkpoint's path.

        Raises:
            CheckpointError: The save failed (an earlier asynchronous one included); every
                earlier checkpoint and the latest pointer are left as they were.
        """
        from .io import save_checkpoint
        from .rng import get_rng_state
        from .workdir import keep_other_runs_checkpoint, update_latest

        if self._saving_in_background:  # the save in flight ends first, on every rank
            error = dist.broadcast_object(self._finish_saves())
            if error is not None:
                raise error
        self._saving_in_background = asynchronous
        path = os.path.join(self.work_dir, filename)
        if dist.is_main_process():  # a fresh run never saves over an earlier run's checkpoint
            keep_other_runs_checkpoint(path, self._run_folder())
        rng = dist.all_gather_object(get_rng_state())  # the RNG states of every rank
        for part in self.parts.values():  # what a part gathers from every rank (collectives)
            gather = getattr(part, "gather", None)
            if gather is not None:
                gather()
        shards = self._save_shards(path, asynchronous)
        self._pending_shards = shards if asynchronous else None
        error = None
        if dist.is_main_process():
            try:
                state = self.state(meta, rng=list(rng))
                if shards and not asynchronous:
                    state["sharded"] = shards.result()
                self.call_hook("before_save_checkpoint", checkpoint=state)
                if asynchronous:  # the .pth is written once the shards are (then "sharded")
                    on_done = (lambda p: update_latest(self.work_dir, p)) if latest else None
                    prepare = (lambda st: st.update(sharded=shards.result())) if shards else None
                    self._saver = self._saver or AsyncCheckpointSaver()
                    self._saver.save(state, path, on_done=on_done, prepare=prepare)
                else:
                    save_checkpoint(state, path)
                    if latest:
                        update_latest(self.work_dir, path)
            except LibaiError as e:  # a failed write, or a hook refusing the save (NaN weights)
                error = e
        # every rank learns of a failure on rank 0, so that all stop (or go on) together
        error = dist.broadcast_object(error)
        if error is not None:
            raise error
        return path

    def save_at_stop(self, iteration: int, force: bool = False) -> str:
        """The save when a signal stops training: through the save policy (CheckpointHook:
        the file then joins its rotation) or, when the config has none, as ``iter_<n>.pth``;
        returns the checkpoint's absolute path once the file and the latest pointer are complete.

        Args:
            iteration: The iterations completed.
            force: Save even when this iteration was just saved (a validation was interrupted:
                the new checkpoint records that it must rerun).
        """
        if self.schedule is not None:
            path = self.schedule.save_now(self, iteration, force=force)
        else:  # checkpoints are off in the config: the one at the stop is written all the same
            path = self.save(f"iter_{iteration}.pth")
        return os.path.abspath(path)

    def best(self) -> dict | None:
        """The best checkpoint of the save policy (absolute path, metric, score), or None."""
        best_file = getattr(self.schedule, "best_file", None)
        if not best_file:
            return None
        return {"checkpoint": os.path.abspath(os.path.join(self.work_dir, best_file)),
                "metric": self.schedule.best_metric, "score": self.schedule.best_score}

    def _save_shards(self, path: str, asynchronous: bool) -> Any:
        """FSDP2 / tensor parallel: every rank writes its shards (libai.checkpoint.sharded);
        returns the save (:class:`~libai.checkpoint.sharded.PendingShards`) or None."""
        from .sharded import save_sharded

        if not self._sharded:
            return None
        optimizer, grads = self._in_shards()
        return save_sharded(path, self.unwrapped_model, optimizer, with_grads=grads,
                            asynchronous=asynchronous)

    def _in_shards(self) -> tuple[Any, bool]:
        """The optimizer whose state goes into the model's shards (a part's ``shards()``), or
        None, and whether the gradients of an accumulation window go too."""
        for part in self.parts.values():
            shards = getattr(part, "shards", None)
            if shards is not None:
                return shards()
        return None, False

    def wait(self) -> None:
        """Block until an asynchronous save in flight is complete; re-raise its failure."""
        error = self._finish_saves()
        if error is not None:
            raise error

    def close(self) -> None:
        """Never leave a writer thread behind (on any exit, Ctrl-C included): wait for it, and
        log a failure rather than raise it (training may be ending by another error)."""
        try:
            self.wait()
        except CheckpointError as e:
            self.logger.error(str(e))

    def _finish_saves(self) -> LibaiError | None:
        """Wait for this rank's save in flight (no collective); returns its failure."""
        pending, self._pending_shards = self._pending_shards, None
        return finish_saves(self._saver if dist.is_main_process() else None, pending)

    # --------------------------------------------------------------------------- load
    def load_weights(self, path: str, strict: bool = True, remap: Any = None) -> Any:
        """Load model weights only (``load_from``); returns the load report.

        ``path`` is a libai checkpoint, or a Hugging Face folder (``config.json`` + weights) of a
        BERT or GPT-2 model: its weights are converted to this model's names first, after
        checking that the folder's model type and dimensions match the built model.
        """
        from .weights import load_weights

        elsewhere = self.execution.elsewhere if self.execution is not None else ()
        report, iteration = load_weights(self.unwrapped_model, path, strict=strict, remap=remap,
                                         sharded=self._sharded, elsewhere=elsewhere)
        if iteration is not None:
            self.loaded_iter = iteration
        at = f" (iteration {self.loaded_iter})" if self.loaded_iter else ""
        self.logger.info(f"Loaded weights from {path}{at}" + (f"\n{report}" if str(report) else ""))
        return report

    def resume(self, path: str) -> None:
        """Restore the whole run from ``path`` so training continues exactly where it stopped:
        the model, then every tracked part the file has a state for, then the RNG states."""
        from .io import load_checkpoint
        from .rng import set_rng_state

        ckpt = load_checkpoint(path)
        if POSITION not in ckpt:
            raise CheckpointError(f"{path} holds no training state (it was saved outside training); "
                                  f"use load_from={path!r} to load its weights instead.")
        meta = ckpt.get("meta", {})
        check_resume_config(meta.get("config_json"), meta.get("world_size"), self.cfg,
                            self.world_size, self.logger, saved_shares=meta.get("data_shares"),
                            shares=self.meta.get("data_shares"), saved_fit=meta.get("batch_fit"),
                            fit=self.meta.get("batch_fit"))
        self._load_model(path, ckpt)
        for name, part in self.parts.items():
            if name in ckpt:  # a part the file predates starts as built
                part.load_state_dict(ckpt[name])
        self._continue_series(meta.get("run_folder"))
        rng = ckpt.get("rng") or []
        if len(rng) == self.world_size:
            set_rng_state(rng[self.rank])
        self.call_hook("after_load_checkpoint", checkpoint=ckpt)
        self._say_resumed(path, ckpt)

    def _load_model(self, path: str, ckpt: dict) -> None:
        from .model_state import load_model_state
        from .sharded import load_sharded

        if "sharded" not in ckpt:
            load_model_state(self.unwrapped_model, ckpt["state_dict"], strict=True)
            return
        # every rank reads its part; DCP reshards to this run's layout
        load_sharded(path, ckpt["sharded"], self.unwrapped_model, self._in_shards()[0])
        if ckpt["sharded"].get("world_size") != self.world_size:
            self.logger.info(f"Sharded checkpoint of {ckpt['sharded'].get('world_size')} "
                             f"process(es) loaded into {self.world_size}: resharded on load.")

    def _say_resumed(self, path: str, ckpt: dict) -> None:
        at = ckpt[POSITION]
        self.logger.info(
            f"Resumed from {path} at iteration {int(at['iter'])} (epoch {int(at['epoch'])}, batch "
            f"{at['batch_in_epoch']} of the epoch). From the checkpoint: model weights, "
            f"optimizer, schedulers, loop and sampler position, RNG states, "
            f"{len(ckpt.get('hooks', {}))} hook state(s). From the current config: everything else."
        )
        max_iters = getattr(self.parts.get(POSITION), "max_iters", None)
        if max_iters is not None and int(at["iter"]) >= max_iters:  # a finished run: say so
            self.logger.warning(
                f"{os.path.basename(path)} is the end of this training (iteration "
                f"{int(at['iter'])} of {max_iters}): nothing is left to train, so the run goes "
                f"straight to what follows training (the test, when the config has one). To "
                f"train longer, raise train_cfg.max_iters and pass --allow-changes "
                f"train_cfg.max_iters.")

    def restore(self, weights_only: bool = False) -> None:
        """Apply the config's ``resume`` / ``load_from``, once per run: training resumes the
        latest complete checkpoint (or the one named); evaluation (``weights_only``) and a run
        with nothing to resume load the ``load_from`` weights."""
        if self._restored:
            return
        self._restored = True
        resume, load_from = self.cfg.get("resume"), self.cfg.get("load_from")
        if resume and not weights_only:
            path = resume if isinstance(resume, str) else find_resumable(self.work_dir, self.logger)
            if path is not None:
                self.resume(path)
                return
            policy = dict(self.cfg.get("resume_options") or {}).get("damaged", "stop")
            set_damaged_aside(self.work_dir, policy, self.logger)
            self.logger.info(f"resume: no complete checkpoint in {self.work_dir}; starting fresh.")
        if load_from:
            opts = dict(load_from) if isinstance(load_from, dict) else {"path": load_from}
            unknown = set(opts) - {"path", "strict", "remap"}
            if unknown or "path" not in opts:
                raise ConfigError(
                    f"load_from must be a path or dict(path=..., strict=True, remap=None); got "
                    f"keys {sorted(opts)}.")
            self.load_weights(opts["path"], strict=opts.get("strict", True), remap=opts.get("remap"))

    def _run_folder(self) -> str | None:
        """The name of the run folder holding this training's scalar series, for the meta."""
        return run_folder_name(self.work_dir, self.series_dir)

    def _continue_series(self, name: Any) -> None:
        """After a resume, write the scalars into the series the checkpoint belongs to
        (:func:`~libai.checkpoint.workdir.series_to_continue`)."""
        folder = None if self.dry_run else series_to_continue(self.work_dir, name)
        if folder is not None:
            self.series_dir = folder
            self.logger.info(f"Scalars continue the series in {folder}.")
