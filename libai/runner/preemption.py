"""What the runner does when a signal asks training to stop: write a checkpoint of the exact
iteration reached, say so in one line, and end with :class:`~libai.utils.signals.Preempted`.

The signal handling itself (handlers that only set a flag, the all-reduce that makes ranks agree)
lives in :mod:`libai.utils.signals`; the loops poll it between steps and between evaluation
batches and call :func:`stop_on_signal` on every rank at the same point.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from typing import Any, NoReturn

from libai.utils import dist
from libai.utils.signals import Preempted, StopRequest, parse_preemption

__all__ = ["build_stop_request", "stop_on_signal"]


def build_stop_request(cfg: Any) -> StopRequest | None:
    """The runner's :class:`StopRequest` from the ``preemption`` key (on by default), or None
    when it is off. Validated when the runner is built, installed only while it trains."""
    names = parse_preemption(cfg.get("preemption", True))
    return StopRequest(names) if names else None


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
    message = (f"Stopped by {name} at {where}: {note}. Continue with: {_resume_command(runner)}"
               f" (exit status {128 + signum}).")
    runner.logger.warning(message)
    raise Preempted(signum, message)


def _resume_command(runner: Any) -> str:
    """The command line that continues this run: the one that started it, with --resume."""
    argv = list(sys.argv)
    if not argv or os.path.basename(argv[0]) != "train.py":
        return f"the same code with resume=True (work dir {runner.work_dir})"
    if "--resume" not in argv:
        argv.append("--resume")
    head = ["torchrun", "--nproc_per_node", str(dist.get_world_size())] if dist.get_world_size() > 1 \
        else ["python"]
    return shlex.join(head + argv)
