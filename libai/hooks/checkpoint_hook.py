"""CheckpointHook: periodic, last and best checkpoints, with a cap on how many are kept."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from libai.checkpoint import read_latest, remove_checkpoint
from libai.registry import HOOKS
from libai.utils.errors import CheckpointError, ConfigError
from libai.utils.suggest import did_you_mean

from ._metrics import check_rule, improved, infer_rule, lookup_metric
from .hook import Hook, RunnerView

__all__ = ["CheckpointHook"]


def _int_option(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or (value < minimum and value != -1):
        raise ConfigError(
            f"CheckpointHook: {name} must be -1 (off) or an int >= {minimum}, got {value!r}."
        )
    return value


def _latest_target(work_dir: str) -> str | None:
    """The checkpoint the work dir's latest pointer names (absolute), or None."""
    try:
        target = read_latest(work_dir)
    except CheckpointError:  # a damaged pointer protects nothing; resuming reports it
        return None
    return None if target is None else os.path.abspath(target)


@HOOKS.register_module()
class CheckpointHook(Hook):
    """Decide when to save full, resumable checkpoints; ``runner.checkpointer`` writes them.

    Checkpoints are named after the number of *completed* iterations or epochs:
    ``iter_1000.pth`` holds the state after 1000 iterations; resuming from it runs iteration
    1001 next. Every periodic and last save moves the work dir's latest pointer (the
    checkpointer does that), so ``--resume`` starts from the newest full checkpoint by iteration; a best
    checkpoint moves it only when it is newer than every other (validation between two
    periodic saves), never at the iteration of ``iter_<n>.pth``.

    Args:
        interval: Save every this many iterations (or epochs with ``by_epoch``); -1 disables
            periodic saving. Defaults to -1.
        by_epoch: Count ``interval`` and ``save_begin`` in epochs and name files
            ``epoch_<n>.pth``. Defaults to False.
        max_keep_ckpts: Keep at most this many periodic (and last) checkpoints, deleting the
            oldest first; -1 keeps all. The checkpoint the latest pointer names and the best
            checkpoint are never deleted. Defaults to -1.
        save_last: Save when training ends, unless the final state was just saved. Defaults to
            True.
        save_best: A validation metric (``'val/accuracy'``), or ``'auto'`` for the first metric
            of the first validation. After each validation during training, a better score saves
            ``best_<metric>_iter_<n>.pth`` (a full checkpoint) and deletes the previous best.
            Defaults to None (off).
        rule: ``'greater'`` or ``'less'``: which direction is better for ``save_best``.
            Defaults to None: inferred from the name ('loss', 'error', 'perplexity', 'mse' ...
            mean less; 'acc', 'f1', 'map', 'iou' ... mean greater), a ConfigError when it cannot
            be.
        save_begin: First iteration (or epoch) count at which periodic saving may happen; the
            interval counts from there. Defaults to 0.
        async_save: Write checkpoints in a background thread: training is blocked only while
            the state is copied to host memory; the next save waits for the previous one and the
            latest pointer moves only once a checkpoint is complete. Defaults to False.
        on_error: What a failed save (a full disk, say) does: 'raise' stops training with one
            clear error; 'warn' logs it and trains on. Either way every earlier checkpoint and
            the latest pointer stay intact. Defaults to 'raise'.

    State kept in checkpoints: the best score and file, and the list of kept checkpoints, so that
    a resumed run keeps pruning the same files and compares against the same best.
    """

    priority = "VERY_LOW"

    def __init__(
        self,
        interval: int = -1,
        by_epoch: bool = False,
        max_keep_ckpts: int = -1,
        save_last: bool = True,
        save_best: str | None = None,
        rule: str | None = None,
        save_begin: int = 0,
        async_save: bool = False,
        on_error: str = "raise",
    ) -> None:
        if on_error not in ("raise", "warn"):
            raise ConfigError(f"CheckpointHook: on_error must be 'raise' or 'warn', got {on_error!r}."
                              f"{did_you_mean(str(on_error), ['raise', 'warn'])}")
        self.async_save = bool(async_save)
        self.on_error = on_error
        self.interval = _int_option("interval", interval, 1)
        self.by_epoch = bool(by_epoch)
        self.max_keep_ckpts = _int_option("max_keep_ckpts", max_keep_ckpts, 1)
        self.save_last = bool(save_last)
        if isinstance(save_begin, bool) or not isinstance(save_begin, int) or save_begin < 0:
            raise ConfigError(
                f"CheckpointHook: save_begin must be an int >= 0, got {save_begin!r}."
            )
        self.save_begin = save_begin
        if save_best is not None and (not isinstance(save_best, str) or not save_best):
            raise ConfigError(
                f"CheckpointHook: save_best must be a metric name such as 'val/accuracy', "
                f"'auto' or None, got {save_best!r}."
            )
        self.save_best = save_best
        self.rule = check_rule(rule, "CheckpointHook")
        if save_best not in (None, "auto") and self.rule is None:
            self.rule = infer_rule(save_best, "CheckpointHook(save_best=...)")
        self.best_metric: str | None = None if save_best == "auto" else save_best
        self.best_score: float | None = None
        self.best_file: str | None = None  # relative to the work dir, like the entries of kept
        self.kept: list[str] = []  # periodic checkpoints, oldest first, relative to the work dir
        self._last_saved_iter: int | None = None
        self._epoch_end: tuple[int, int] | None = None  # (completed epochs, iteration) at its end
        self._training = False
        if self.by_epoch or self.interval <= 0:  # nothing to check per iteration
            self.disable_stage("after_train_iter")

    # ------------------------------------------------------------------------ schedule
    def _due(self, count: int) -> bool:
        if self.interval <= 0 or count < self.save_begin:
            return False
        return (count - self.save_begin) % self.interval == 0

    def monitored_metrics(self) -> list[str]:
        """The validation metric this hook reads: the runner looks it up before training."""
        return [self.save_best] if self.save_best not in (None, "auto") else []

    def before_train(self, runner: RunnerView) -> None:
        self._training = True
        # the state we start from is either the initial one or the checkpoint we resumed from
        self._last_saved_iter = runner.iter
        self._epoch_end = None

    def after_train_iter(
        self, runner: RunnerView, batch_idx: int, data_batch: Any = None, outputs: Any = None
    ) -> None:
        done = runner.iter + 1
        if not self.by_epoch and self._due(done):
            self._save_periodic(runner.checkpointer, f"iter_{done}.pth", done)

    def after_train_epoch(self, runner: RunnerView) -> None:
        # runner.epoch is still the 0-based index of the epoch that just ended
        epochs_done = runner.epoch + 1
        self._epoch_end = (epochs_done, runner.iter)
        if self.by_epoch and self._due(epochs_done):
            self._save_periodic(runner.checkpointer, f"epoch_{epochs_done}.pth", runner.iter)

    def after_train(self, runner: RunnerView) -> None:
        self._training = False
        if not self.save_last or self._last_saved_iter == runner.iter:
            self._guard(runner.checkpointer, runner.checkpointer.wait)
            return
        if self.by_epoch and self._epoch_end is not None and self._epoch_end[1] == runner.iter:
            filename = f"epoch_{self._epoch_end[0]}.pth"
        else:  # iteration loop, or stopped inside an epoch
            filename = f"iter_{runner.iter}.pth"
        self._save_periodic(runner.checkpointer, filename, runner.iter)

    def save_now(self, checkpointer: Any, done: int, force: bool = False) -> str:
        """Save ``iter_<n>.pth`` now, for a run that a signal stops between two steps, unless
        this iteration was just saved (and ``force`` is False); wait until the file and the
        latest pointer are complete. The file joins the rotation like a periodic one.

        Args:
            checkpointer: The run's :class:`~libai.checkpoint.Checkpointer` (it calls this).
            done: The iterations completed.
            force: Save even when this iteration was just saved.

        Returns:
            The checkpoint of the current iteration.

        Raises:
            CheckpointError: The save failed, whatever ``on_error`` says: the run is ending.
        """
        if force or self._last_saved_iter != done:
            self._last_saved_iter = None
            self._save_periodic(checkpointer, f"iter_{done}.pth", done)
        checkpointer.wait()
        latest = _latest_target(checkpointer.work_dir)
        if self._last_saved_iter != done or latest is None:
            raise CheckpointError(f"No checkpoint of iteration {done} could be written (see the "
                                  f"error above); --resume continues from the last complete one.")
        return latest

    # --------------------------------------------------------------------------- saving
    def _guard(self, checkpointer: Any, fn: Any, *args: Any) -> Any:
        """Run a save under the ``on_error`` policy; returns None when a save failed."""
        try:
            return fn(*args)
        except CheckpointError as e:
            if self.on_error == "raise":
                raise
            checkpointer.logger.error(f"{e} Training goes on (CheckpointHook on_error='warn').")
            return None

    def _save(self, checkpointer: Any, filename: str, latest: bool = True) -> str | None:
        """Save through the checkpointer; returns the file's name relative to the work dir, or
        None when the save failed under ``on_error='warn'``."""
        path = self._guard(checkpointer, checkpointer.save, filename, None, self.async_save, latest)
        if path is None:
            return None
        return os.path.relpath(os.path.abspath(path), os.path.abspath(checkpointer.work_dir))

    def _save_periodic(self, checkpointer: Any, filename: str, done_iter: int) -> None:
        # Decide what to prune before saving, so that the checkpoint records the list as it will
        # be once the old files are gone; the files themselves go only after the save succeeded.
        before = list(self.kept)
        kept = [p for p in self.kept if p != filename] + [filename]
        victims: list[str] = []
        if self.max_keep_ckpts > 0:
            for name in kept[:-1]:
                if len(kept) - len(victims) <= self.max_keep_ckpts:
                    break
                if name != self.best_file:
                    victims.append(name)
        self.kept = [p for p in kept if p not in victims]
        saved = self._save(checkpointer, filename)
        if saved is None:  # failed: keep every earlier file
            self.kept = before
            return
        self.kept[-1] = saved
        self._last_saved_iter = done_iter
        self._delete(checkpointer, victims)

    def _delete(self, checkpointer: Any, names: list[str]) -> None:
        """Delete checkpoints (rank 0 only), never the one the latest pointer names."""
        if not names or checkpointer.rank != 0:
            return
        latest = _latest_target(checkpointer.work_dir)
        for name in names:
            path = os.path.abspath(os.path.join(checkpointer.work_dir, name))
            if path == latest:  # something else moved the pointer here; keep it
                continue
            remove_checkpoint(path)
            checkpointer.logger.info(f"Removed checkpoint {path}")

    # ----------------------------------------------------------------------------- best
    def after_val(self, runner: RunnerView, metrics: Mapping[str, float] | None = None) -> None:
        if self.save_best is None or not self._training:
            return
        metrics = dict(metrics or {})
        if self.best_metric is None:  # 'auto'
            if not metrics:
                return
            self.best_metric = next(iter(metrics))
            if self.rule is None:
                self.rule = infer_rule(self.best_metric, "CheckpointHook(save_best='auto')")
            runner.logger.info(
                f"CheckpointHook: save_best='auto' tracks '{self.best_metric}' "
                f"({self.rule} is better)."
            )
        score = lookup_metric(metrics, self.best_metric, "CheckpointHook(save_best=...)")
        assert self.rule is not None
        if not math.isfinite(score) or not improved(score, self.best_score, self.rule):
            return
        previous, previous_score = self.best_file, self.best_score
        tag = re.sub(r"[^0-9A-Za-z_.-]+", "_", self.best_metric)
        filename = f"best_{tag}_iter_{runner.iter}.pth"
        # set before saving: the best checkpoint records itself as the best
        self.best_score, self.best_file = score, filename
        # the latest pointer stays on iter_<n>.pth of this iteration, or a newer one
        newer = self._last_saved_iter is None or runner.iter > self._last_saved_iter
        saved = self._save(runner.checkpointer, filename, latest=newer)
        if saved is None:  # failed under on_error='warn': the earlier best stays the best
            self.best_score, self.best_file = previous_score, previous
            return
        self.best_file = saved
        runner.logger.info(f"New best {self.best_metric} = {score:.6g}: saved {self.best_file}")
        if previous and previous != self.best_file and previous not in self.kept:
            self._delete(runner.checkpointer, [previous])

    # ---------------------------------------------------------------------------- state
    def state_dict(self) -> dict:
        # file names are relative to the work dir, so that a copied work dir resumes safely
        return {
            "best_metric": self.best_metric,
            "best_score": self.best_score,
            "best_file": self.best_file,
            "kept": list(self.kept),
        }

    def load_state_dict(self, state: dict) -> None:
        self.kept = list(state.get("kept", []))
        if self.save_best is None:
            return
        if self.save_best == "auto" or state.get("best_metric") == self.best_metric:
            self.best_metric = state.get("best_metric") or self.best_metric
            self.best_score = state.get("best_score")
            self.best_file = state.get("best_file")
            if self.best_metric is not None and self.rule is None:
                self.rule = infer_rule(self.best_metric, "CheckpointHook(save_best='auto')")
