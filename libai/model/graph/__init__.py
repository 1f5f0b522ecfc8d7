"""Graph mode, in one place: :class:`GraphMode` compiles, checks, falls back and reports.

Graph mode is switched on in the config by one key, ``compile=True`` or ``compile=dict(...)``
(``tools/train.py --graph`` sets it; ``optim_wrapper=dict(type="GraphOptimWrapper", ...)`` is
the older spelling of the same switch); :func:`graph_options` reads it once, where the runner
prepares the model (``libai.runner.distribute``). One :class:`GraphMode` object then owns
everything graph mode does and knows:

- **Compiling.** A transformer's repeated blocks (``parallel_blocks``), each class compiled once
  and its code reused for every block (torch's regional compilation: a cold compile the size of
  one block, not of the model), the rest of the model and the loss eager; a model without blocks,
  or ``compile=dict(regions=False)``, whole with its loss (``torch.compile(model)``); a sharded
  model block by block whatever ``regions`` says. AOTAutograd generates and compiles the backward
  at its first call; the optimizer update (clipping and ``optimizer.step``) is a second compiled function
  (:meth:`GraphMode.run_update`). All with the same ``torch.compile`` options.
- **Fallback.** When compiling the forward, the backward or the update fails, the same work runs
  eager: a failed backward replays the first forward eagerly with the same random numbers. If
  eager fails too, the model has a bug and eager's error is raised; otherwise
  ``on_failure="eager"`` logs one warning and the run stays eager (``failure`` says why),
  ``on_failure="raise"`` stops with :class:`GraphModeError`.
- **Parity check.** For the first ``verify_steps`` training calls an eager copy of the model runs
  on the same batch and the same random numbers; after backward, loss and gradient norm are
  compared (:meth:`GraphMode.backward`). ``on_mismatch`` raises, or keeps the eager gradients and
  goes eager.
- **Report.** Compile times, graph breaks and recompiles with the reasons torch gives (read from
  torch's logging, ``graph/log.py``); a recompile storm (shapes changing every batch)
  is reported once with the fix.

The two objects a run holds only ask it: :class:`GraphModule` (the model the runner trains and
evaluates, whose forward calls :meth:`GraphMode.forward`) and
:class:`libai.optim.GraphOptimWrapper` (whose backward and update go through
:meth:`GraphMode.backward` and :meth:`GraphMode.run_update`; its mixed precision is a
:class:`libai.optim.Precision` policy). The run's execution record (:class:`libai.model.execution.Execution`, ``graph``) hands the
wrapper the model's GraphMode (``optim_wrapper.bind``).

A GraphModule's state dict is the model's with an ``_orig_mod.`` prefix, as ``torch.compile``'s
own wrapper: libai's checkpoints strip it, so eager and graph runs save the same keys.

Files: ``mode.py`` (:class:`GraphMode`, the owner), ``module.py`` (:class:`GraphModule`),
``options.py`` (:func:`graph_options`, :func:`compile_options`, :class:`GraphModeError`),
``log.py`` (what torch's logging reports).
"""

from .mode import GraphMode
from .module import GraphModule
from .options import (
    COMPILE_KEYS,
    GRAPH_KEYS,
    GraphModeError,
    compile_options,
    compile_regions,
    graph_options,
    wrapper_switch,
)

__all__ = ["COMPILE_KEYS", "GRAPH_KEYS", "GraphMode", "GraphModule", "GraphModeError", "compile_options",
           "compile_regions", "graph_options", "wrapper_switch"]
