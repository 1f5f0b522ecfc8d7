"""What the runner does when a signal asks training to stop: write a checkpoint of the exact
iteration reached, say so in one line, and end with :class:`~libai.utils.signals.Preempted`.

The signal handling itself (handlers that only set a flag, the all-reduce that makes ranks agree)
lives in :mod:`libai.utils.signals`; the loops poll it between steps and between evaluation
batches and call :func:`stop_on_signal` on every rank at the same point. In a Slurm batch job
stopped by SIGUSR1 (``--signal=USR1@120``), rank 0 then requeues the job
(:func:`libai.runner.slurm.requeue`), and the line says so instead of naming a command.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from libai.runner import slurm
from libai.utils import dist
from libai.utils.errors import TrainingError
from libai.utils.signals import Preempted, StopRequest, parse_preemption

__all__ = ["build_stop_request", "guarded", "stop_on_signal"]


def build_stop_request(cfg: Any) -> StopRequest | None:
    """The runner's :class:`StopRequest` from the ``preemption`` key (on by default), or None
    when it is off. Validated when the runner is built, installed only while it trains."""
    names = parse_preemption(cfg.get("preemption", True))
    return StopRequest(names) if names else None


T = TypeVar("T")


def guarded(runner: Any, request: StopRequest | None, train: Callable[[], T]) -> T:
    """Run ``train()`` with the stop signals of ``request`` caught (set as ``runner.stop_request``
    while it runs, loader start-up included, for the loops to poll), and a hang or a dead peer
    reported as one line naming this rank (:class:`~libai.utils.errors.TrainingError`)."""
    if request is not None and request.install():
        runner.stop_request = request
    try:
        return train()
    except RuntimeError as e:
        message = dist.collective_failure(e)
        if message is None:
            raise
        raise TrainingError(message) from e
    finally:
        if request is not None:
            request.uninstall()
        runner.stop_request = None


def stop_on_signal(runner: Any, signum: int, val_interrupted: bool = False) -> NoReturn:
    """Checkpoint the current iteration (every rank calls this), log one line, raise Preempted.

    Args:
        runner: The training runner; its train loop is between two steps.
        signum: The signal agreed on by all ranks.
        val_interrupted: A validation was stopped half-way; the checkpoint then asks the
            resumed run to redo it (the train loop recorded that in its state).
    """
    loop = runner.train_loop
    name = signal.Signals(signum).name
    where = f"iteration {loop.iter} of {loop.max_iters}"
    if runner.fast_dev_run:
        path, note = None, "a dry run (--fast-dev-run) saves nothing"
    elif loop.iter == getattr(loop, "start_iter", None) and not val_interrupted:
        path, note = None, ("nothing trained since this run started, nothing to save; --resume "
                            "starts where this run did")
    else:
        path = runner.checkpointer.save_at_stop(loop.iter, force=val_interrupted)
        note = f"checkpoint {path}" + (" (the interrupted validation reruns on resume)"
                                      if val_interrupted else "")
    requeued = None if runner.fast_dev_run else _requeue(runner, name)
    then = requeued or f"Continue with: {_resume_command(runner)}"
    message = f"Stopped by {name} at {where}: {note}. {then} (exit status {128 + signum})."
    runner.logger.warning(message)
    raise Preempted(signum, message)


def _requeue(runner: Any, name: str) -> str | None:
    """Under Slurm, requeue the job from rank 0 (once, the step saved on every rank) and return
    what happened, the same on every rank; None where the job is not requeued."""
    if "SLURM_JOB_ID" not in os.environ or name not in slurm.REQUEUE_SIGNALS:
        return None
    if runner.stop_request is not None:  # requeuing ends the job: Slurm's SIGTERM is expected
        runner.stop_request.settle()
    return dist.broadcast_object(slurm.requeue(name) if dist.is_main_process() else None)


def _resume_command(runner: Any) -> str:
    """The command line that continues this run: the one that started it, with --resume."""
    argv = list(sys.argv)
    script = os.path.basename(argv[0]) if argv else ""
    command = script == "libai" or argv[0].endswith(os.path.join("libai", "__main__.py")) if argv \
        else False
    if script != "train.py" and not (command and argv[1:2] == ["train"]):
        return f"the same code with resume=True (work dir {runner.work_dir})"
    if "--resume" not in argv:
        argv.append("--resume")
    n = dist.get_world_size()
    if command:  # `libai train ...` or `python -m libai train ...`
        head = ["torchrun", "--nproc_per_node", str(n), "-m", "libai"] if n > 1 else (
            ["libai"] if script == "libai" else ["python", "-m", "libai"])
        return shlex.join(head + argv[1:])
    head = ["torchrun", "--nproc_per_node", str(n)] if n > 1 else ["python"]
    if n > 1 and slurm.in_srun_step() and "TORCHELASTIC_RUN_ID" not in os.environ:
        head = ["srun", "python"]  # srun's tasks, no torchrun: sbatch the same script again
    return shlex.join(head + argv)
