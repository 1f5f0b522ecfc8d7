"""Saving and restoring a whole run. The file format and its safety live in libai.checkpoint; this
module only decides what goes into a training checkpoint and puts it back."""

from __future__ import annotations

import os
import time
from typing import Any

from libai.utils import dist
from libai.utils.errors import CheckpointError, ConfigError, LibaiError

from .resume_check import check_resume_config, config_json

__all__ = ["CheckpointMixin"]


class CheckpointMixin:
    """Runner methods for checkpoints; uses the runner's parts, owns no state of its own."""

    _resumed = False
    _config_text: str | None = None
    _loaded_iter = 0  # the training iteration of the checkpoint load_from loaded
    _saving_in_background = False  # the last save was asynchronous (the same on every rank)
    _pending_shards: Any = None  # its shards, while they may still be in flight

    @property
    def config_text(self) -> str:
        """The resolved config as Python text (formatted once: the config is read-only)."""
        if self._config_text is None:
            self._config_text = self.cfg.pretty_text
        return self._config_text

    # --------------------------------------------------------------------------- save
    def checkpoint_state(self, meta: dict | None = None, rng: list | None = None) -> dict:
        """Everything needed to continue the run exactly: weights, optimizer, schedulers, hooks,
        loop and sampler position, RNG states of every rank, config text and versions.

        Args:
            meta: Extra entries for ``state["meta"]``. Defaults to None.
            rng: The RNG states of every rank, by rank. Defaults to this process's only.
        """
        import torch

        from libai.checkpoint import get_rng_state, model_state_for_saving
        from libai.checkpoint.sharded import group_settings, is_sharded_model
        from libai.version import __version__

        loop = self._train_loop
        position = loop.state_dict() if loop is not None else {"iter": 0, "epoch": 0}
        sharded = is_sharded_model(self.unwrapped_model)  # weights and optimizer in the shards
        state = {
            "meta": {
                "libai_version": __version__,
                "torch_version": str(torch.__version__),
                "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                "iter": position["iter"],
                "epoch": position["epoch"],
                "world_size": self.world_size,
                "seed": self.seed,
                "experiment_name": self.experiment_name,
                "config": self.config_text,
                "config_json": config_json(self.cfg),
                "run_folder": self._run_folder(),
                **(meta or {}),
            },
            "state_dict": {} if sharded else model_state_for_saving(self.model),
            "message_hub": self.message_hub.state_dict(),
            "hooks": {key: hook.state_dict() for key, hook in self._stateful_hooks().items()},
            "rng": rng if rng is not None else [get_rng_state()],
        }
        if loop is not None:
            state["loop"] = position
            sampler = getattr(loop.dataloader, "sampler", None)
            if hasattr(sampler, "state_dict"):
                state["sampler"] = sampler.state_dict()
            state["optimizer"] = self.optim_wrapper.state_dict()
            if sharded:
                grads = state["optimizer"].pop("accumulated_grads", None) is not None
                state["optimizer"].update(optimizer=None, grads_in_shards=grads,
                                          param_groups=group_settings(self.optim_wrapper.optimizer))
            state["param_schedulers"] = [s.state_dict() for s in self.param_schedulers]
        return state

    def save_checkpoint(self, filename: str, meta: dict | None = None,
                        asynchronous: bool = False, latest: bool = True) -> str:
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
        from libai.checkpoint import get_rng_state, save_checkpoint, update_latest
        from libai.checkpoint.workdir import keep_other_runs_checkpoint

        if self._saving_in_background:  # the save in flight ends first, on every rank
            error = dist.broadcast_object(self._finish_saves())
            if error is not None:
                raise error
        self._saving_in_background = asynchronous
        path = os.path.join(self.work_dir, filename)
        if dist.is_main_process():  # a fresh run never saves over an earlier run's checkpoint
            keep_other_runs_checkpoint(path, self._run_folder())
        rng = dist.all_gather_object(get_rng_state())
        shards = self._save_shards(path, asynchronous)
        self._pending_shards = shards if asynchronous else None
        grads_by_rank = None if shards else self._gather_accumulated_grads()
        error = None
        if dist.is_main_process():
            try:
                state = self.checkpoint_state(meta, rng=rng)
                if shards and not asynchronous:
                    state["sharded"] = shards.result()
                if grads_by_rank is not None:
                    state["optimizer"]["accumulated_grads"] = grads_by_rank[0]
                    state["optimizer"]["accumulated_grads_by_rank"] = grads_by_rank
                self.call_hook("before_save_checkpoint", checkpoint=state)
                if asynchronous:  # the .pth is written once the shards are (then "sharded")
                    on_done = (lambda p: update_latest(self.work_dir, p)) if latest else None
                    prepare = (lambda st: st.update(sharded=shards.result())) if shards else None
                    self._async_saver().save(state, path, on_done=on_done, prepare=prepare)
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

    def _save_shards(self, path: str, asynchronous: bool) -> Any:
        """FSDP2 / tensor parallel: every rank writes its shards (libai.checkpoint.sharded);
        returns the save (:class:`~libai.checkpoint.sharded.PendingShards`) or None."""
        from libai.checkpoint.sharded import is_sharded_model, save_sharded

        if not is_sharded_model(self.unwrapped_model):
            return None
        training = self._train_loop is not None
        window = training and self.optim_wrapper.accumulated_grads() is not None
        return save_sharded(path, self.unwrapped_model,
                            self.optim_wrapper.optimizer if training else None,
                            with_grads=window, asynchronous=asynchronous)

    def _gather_accumulated_grads(self) -> list | None:
        """Under DDP, mid-window gradients differ by rank (no_sync): gather them, by rank."""
        if self._train_loop is None or self.world_size == 1:
            return None
        grads = self.optim_wrapper.accumulated_grads()
        local = None if grads is None else [None if g is None else g.cpu() for g in grads]
        gathered = dist.all_gather_object(local)
        return None if all(g is None for g in gathered) else gathered

    def wait_for_checkpoints(self) -> None:
        """Block until an asynchronous save in flight is complete; re-raise its failure."""
        error = self._finish_saves()
        if error is not None:
            raise error

    def _finish_saves(self) -> LibaiError | None:
        """Wait for this rank's save in flight (no collective); returns its failure."""
        error = None
        saver = getattr(self, "_saver", None)
        if saver is not None and dist.is_main_process():
            try:
                saver.wait()  # its thread finishes the shards first (PendingShards.result)
            except CheckpointError as e:
                error = e
        pending, self._pending_shards = self._pending_shards, None
        if pending is not None:  # the shards of a save whose .pth was never started, and ranks > 0
            try:
                pending.result()
            except Exception as e:  # DCP raises a rank's write error on every rank
                error = error or CheckpointError(f"Background save of the shards failed: {e}")
        return error

    def _async_saver(self) -> Any:
        if getattr(self, "_saver", None) is None:
            from libai.checkpoint import AsyncCheckpointSaver

            self._saver = AsyncCheckpointSaver()
        return self._saver

    # --------------------------------------------------------------------------- load
    def _stateful_hooks(self) -> dict:
        out: dict[str, Any] = {}
        for hook in self.hooks:
            if hook.is_stateful():
                key, n = hook.state_key, 1
                while key in out:
                    n += 1
                    key = f"{hook.state_key}#{n}"
                out[key] = hook
        return out

    def _log_resharding(self, shards: dict) -> None:
        if shards.get("world_size") != self.world_size:
            self.logger.info(f"Sharded checkpoint of {shards.get('world_size')} process(es) "
                             f"loaded into {self.world_size}: resharded on load.")

    def load_checkpoint(self, path: str, strict: bool = True, remap: Any = None) -> Any:
        """Load model weights only (``load_from``); returns the load report.

        ``path`` is a libai checkpoint, or a Hugging Face folder (``config.json`` + weights) of a
        BERT or GPT-2 model: its weights are converted to this model's names first, after
        checking that the folder's model type and dimensions match the built model.
        """
        from libai.checkpoint import load_checkpoint, load_model_state
        from libai.checkpoint.sharded import is_sharded_model, load_full_into_sharded, load_sharded
        from libai.model.zoo.hf import hf_state_dict_for, is_hf_folder

        if is_hf_folder(path):
            weights = hf_state_dict_for(self.unwrapped_model, path)
        else:
            ckpt = load_checkpoint(path)
            weights = ckpt.get("state_dict", ckpt)
            if "sharded" in ckpt:  # every rank reads its part, resharded to this run's layout
                load_sharded(path, ckpt["sharded"], self.unwrapped_model, None)
                weights = None
            it = ckpt.get("meta", {}).get("iter") if isinstance(ckpt.get("meta"), dict) else None
            if isinstance(it, int) and not isinstance(it, bool) and it >= 0:
                self._loaded_iter = it
        if weights is None:
            report = ""
        elif is_sharded_model(self.unwrapped_model):  # whole tensors into this run's shards
            report = load_full_into_sharded(self.unwrapped_model, weights, strict=strict)
        else:
            report = load_model_state(self.unwrapped_model, weights, strict=strict, remap=remap)
        at = f" (iteration {self._loaded_iter})" if self._loaded_iter else ""
        self.logger.info(f"Loaded weights from {path}{at}" + (f"\n{report}" if str(report) else ""))
        return report

    def resume(self, path: str) -> None:
        """Restore the whole run from ``path`` so training continues exactly where it stopped."""
        from libai.checkpoint import load_checkpoint, load_model_state, set_rng_state
        from libai.checkpoint.sharded import load_sharded, restore_group_settings

        ckpt = load_checkpoint(path)
        if "loop" not in ckpt:
            raise CheckpointError(f"{path} holds no training state (it was saved outside training); "
                                  f"use load_from={path!r} to load its weights instead.")
        meta = ckpt.get("meta", {})
        check_resume_config(meta.get("config_json"), meta.get("world_size"), self.cfg,
                            self.world_size, self.logger)
        if "sharded" in ckpt:  # every rank reads its part; DCP reshards to this run's layout
            load_sharded(path, ckpt["sharded"], self.unwrapped_model, self.optim_wrapper.optimizer)
            self._log_resharding(ckpt["sharded"])
        else:
            load_model_state(self.unwrapped_model, ckpt["state_dict"], strict=True)
        optim_state = dict(ckpt["optimizer"])
        by_rank = optim_state.pop("accumulated_grads_by_rank", None)
        if by_rank is not None and len(by_rank) == self.world_size:
            optim_state["accumulated_grads"] = by_rank[self.rank]  # each rank its own window
        self.optim_wrapper.load_state_dict(optim_state)
        if "sharded" in ckpt:
            restore_group_settings(self.optim_wrapper.optimizer, optim_state["param_groups"])
        for sched, st in zip(self.param_schedulers, ckpt.get("param_schedulers", [])):
            sched.load_state_dict(st)
        loop = self.train_loop
        loop.load_state_dict(ckpt["loop"])
        sampler = getattr(loop.dataloader, "sampler", None)
        if "sampler" in ckpt and hasattr(sampler, "load_state_dict"):
            sampler.load_state_dict(ckpt["sampler"])
            sampler.skip(ckpt["loop"]["batch_in_epoch"] * (loop.dataloader.batch_size or 1))
        hooks = self._stateful_hooks()
        for key, st in ckpt.get("hooks", {}).items():
            if key in hooks:
                hooks[key].load_state_dict(st)
        self.message_hub.load_state_dict(ckpt.get("message_hub", {}))
        self._continue_series(meta.get("run_folder"))
        rng = ckpt.get("rng") or []
        if len(rng) == self.world_size:
            set_rng_state(rng[self.rank])
        self.call_hook("after_load_checkpoint", checkpoint=ckpt)
        self.logger.info(
            f"Resumed from {path} at iteration {loop.iter} (epoch {loop.epoch}, batch "
            f"{ckpt['loop']['batch_in_epoch']} of the epoch). From the checkpoint: model weights, "
            f"optimizer, schedulers, loop and sampler position, RNG states, "
            f"{len(ckpt.get('hooks', {}))} hook state(s). From the current config: everything else."
        )

    def _run_folder(self) -> str | None:
        """The name of the run folder holding this training's scalar series, for the meta."""
        series = getattr(self, "series_dir", None)
        if series is None or os.path.dirname(os.path.abspath(series)) != self.work_dir:
            return None  # a dry run's temporary folder
        return os.path.basename(series)

    def _continue_series(self, name: Any) -> None:
        """After a resume, write the scalars into the series the checkpoint belongs to, when its
        run folder is in this work dir; else this run's own folder starts a series whose steps
        continue from the checkpoint's."""
        from libai.utils.run_layout import RUN_FOLDER

        if self.fast_dev_run or not isinstance(name, str) or not RUN_FOLDER.match(name):
            return
        folder = os.path.join(self.work_dir, name)
        if os.path.isdir(folder):
            self.series_dir = folder
            self.logger.info(f"Scalars continue the series in {folder}.")

    def _load_or_resume(self, weights_only: bool = False) -> None:
        """Apply ``resume`` / ``load_from`` from the config, once."""
        if self._resumed:
            return
        self._resumed = True
        resume, load_from = self.cfg.get("resume"), self.cfg.get("load_from")
        if resume and not weights_only:
            path = resume if isinstance(resume, str) else self._find_resumable()
            if path is not None:
                self.resume(path)
                return
            self._set_damaged_aside()
            self.logger.info(f"resume: no complete checkpoint in {self.work_dir}; starting fresh.")
        if load_from:
            opts = dict(load_from) if isinstance(load_from, dict) else {"path": load_from}
            unknown = set(opts) - {"path", "strict", "remap"}
            if unknown or "path" not in opts:
                raise ConfigError(
                    f"load_from must be a path or dict(path=..., strict=True, remap=None); got "
                    f"keys {sorted(opts)}.")
            self.load_checkpoint(opts["path"], strict=opts.get("strict", True), remap=opts.get("remap"))

    def _set_damaged_aside(self) -> None:
        """Nothing to resume from, but damaged checkpoints are there: stop, naming them, unless
        ``resume_options.damaged='rename'`` (``--move-damaged``) asks to move them aside to
        ``*.damaged`` first. Training over them would overwrite bytes the user may recover.
        Files without a manifest (a save cut short, e.g. by kill -9) are moved aside without
        asking: they never were complete, and a restarted worker must be able to start fresh."""
        from libai.checkpoint import damaged_checkpoints, manifest_path, move_aside

        found = None
        if dist.is_main_process():
            found = [(str(p), manifest_path(p).exists())
                     for p in damaged_checkpoints(self.work_dir)]
        found = dist.broadcast_object(found)
        if not found:
            return
        names = ", ".join(os.path.basename(p) for p, _ in found)
        damaged = any(has_manifest for _, has_manifest in found)
        policy = dict(self.cfg.get("resume_options") or {}).get("damaged", "stop")
        if damaged and policy != "rename":
            raise CheckpointError(
                f"--resume: the only checkpoints in {self.work_dir} are damaged or incomplete "
                f"({names}); nothing was changed. Move them aside yourself, or pass --move-damaged "
                f"(resume_options=dict(damaged='rename')) to rename them to *.damaged, keeping "
                f"every byte, and start fresh.")
        if dist.is_main_process():
            for path, _ in found:
                move_aside(path)
        dist.barrier()
        what = "damaged" if damaged else "unfinished (no manifest: a save was cut short)"
        self.logger.warning(f"resume: moved the {what} checkpoint(s) {names} to *.damaged, every "
                            f"byte kept.")

    def _find_resumable(self) -> str | None:
        from libai.checkpoint import find_resumable

        return find_resumable(self.work_dir, logger=self.logger)
