"""FLOP counting that cannot end a run, and counts attention on every device and head layout.

::

    from libai.model.flops import flop_counter

    counter = flop_counter()
    with counter:
        step()                       # a failing formula is recorded, the step goes on
    counter.get_total_flops(), counter.failure   # failure: None, or "aten.mm: AssertionError: ..."

``torch.utils.flop_counter.FlopCounterMode`` runs its formulas inside the counted step, so a formula
that raises ends the step (and the run) that was only being measured. torch 2.11's SDPA formulas
assert that query and key/value have the same number of heads, which grouped-query attention
(Llama's ``enable_gqa=True``: fewer key/value heads) does not; and the CPU's SDPA kernel
(``_scaled_dot_product_flash_attention_for_cpu``) has no formula at all, so attention counted 0 on a
CPU. :data:`ATTENTION_FORMULAS` counts every SDPA kernel with the query's heads (each query head
reads its group's key/value head: the same work as repeating the key/value heads first).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["ATTENTION_FORMULAS", "SafeFlopCounter", "attention_backward_flops",
           "attention_flops", "flop_counter"]


def _dims(q: Any, k: Any, v: Any) -> tuple[int, int, int, int, int, int]:
    """(batch, query heads, query length, key length, query/key width, value width) of SDPA's
    (B, heads, length, width) shapes; key/value may have fewer heads, a divisor of the query's."""
    if not (len(q) == len(k) == len(v) == 4):
        raise ValueError(f"attention shapes must be (B, heads, length, width), got "
                         f"q={tuple(q)}, k={tuple(k)}, v={tuple(v)}")
    b, hq, sq, dq = q
    _, hkv, sk, _ = k
    if hkv <= 0 or hq % hkv or k[0] != b or v[0] != b or k[3] != dq or v[1] != hkv or v[2] != sk:
        raise ValueError(f"attention shapes do not fit together: q={tuple(q)}, k={tuple(k)}, "
                         f"v={tuple(v)}")
    return b, hq, sq, sk, dq, v[3]


def attention_flops(q: Any, k: Any, v: Any) -> int:
    """Forward: scores ``q @ k^T`` and output ``scores @ v``, 2 FLOPs per multiply-add, for every
    query head (causal masking not subtracted, as torch's own formula)."""
    b, h, sq, sk, dq, dv = _dims(q, k, v)
    return 2 * b * h * sq * sk * (dq + dv)


def attention_backward_flops(q: Any, k: Any, v: Any) -> int:
    """Backward: the scores again (``dq``), the gradients of the scores and of ``v`` (``dv`` each),
    of ``q`` and of ``k`` (``dq`` each): torch's five products, for every query head."""
    b, h, sq, sk, dq, dv = _dims(q, k, v)
    return 2 * b * h * sq * sk * (3 * dq + 2 * dv)


def _forward(q: Any, k: Any, v: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    return attention_flops(q, k, v)


def _backward(grad_out: Any, q: Any, k: Any, v: Any, *args: Any, out_shape: Any = None,
              **kwargs: Any) -> int:
    return attention_backward_flops(q, k, v)


def _ops(*names: str) -> list[Any]:
    """The aten ops of ``names`` this torch has (cuDNN attention came in 2.5)."""
    return [getattr(torch.ops.aten, n) for n in names if hasattr(torch.ops.aten, n)]


_KERNELS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")
#: ``custom_mapping`` for FlopCounterMode: SDPA's kernels, forward and backward (shape formulas).
ATTENTION_FORMULAS: dict[Any, Any] = {
    **{op: _forward for op in _ops(*_KERNELS)},
    **{op: _backward for op in _ops(*(f"{n}_backward" for n in _KERNELS))},
}


class SafeFlopCounter(FlopCounterMode):
    """A FlopCounterMode whose formulas cannot raise into the counted step: the first failure is
    kept in ``failure`` (``"aten.mm: AssertionError: ..."``) and that op counts 0."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failure: str | None = None
        self.flop_registry = {op: self._guard(op, f) for op, f in self.flop_registry.items()}

    def _guard(self, op: Any, formula: Any) -> Any:
        def guarded(*args: Any, **kwargs: Any) -> int:
            try:
                return formula(*args, **kwargs)
            except Exception as e:  # the step must go on: the count is what is lost
                if self.failure is None:
                    self.failure = f"aten.{getattr(op, '__name__', op)}: {type(e).__name__}: {e}"
                return 0

        return guarded


def flop_counter() -> SafeFlopCounter:
    """A :class:`SafeFlopCounter` (no display) with :data:`ATTENTION_FORMULAS`."""
    return SafeFlopCounter(display=False, custom_mapping=ATTENTION_FORMULAS)
