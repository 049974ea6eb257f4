"""A timer for CPU tests whose seconds are the work a call does, counted rather than timed.

A test that compares timings of one machine (phases against the end-to-end call, a slow kernel against a fast
one) fails when another process takes the cores at the wrong moment. :class:`WorkClock` has the interface of
:class:`fp8bench.measure.timing.CpuTimer` (``time(fn)`` runs the call once and returns seconds), but its seconds are a
fixed cost per ATen operator dispatched plus the call's FLOPs (the formulas of torch's ``FlopCounterMode``, read
from ``torch.utils.flop_counter.flop_registry``) at a fixed rate: the
same call always takes the same time, and a call that does twice the work takes twice as long. Nothing about the
real speed of this CPU can be read from it; what it shows is whether the measured functions do the work they claim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

OP_COST_S = 1e-6  # every operator: dispatch, a small elementwise kernel
FLOP_RATE = 1e9  # FLOP/s of the counted matmul-like operators


class _WorkCounter(TorchDispatchMode):
    """Counts every operator and the FLOPs of those torch has a formula for. (``FlopCounterMode`` itself also
    tracks modules with autograd hooks, which ``torch.autograd.grad`` in a backward phase refuses.)"""

    def __init__(self) -> None:
        super().__init__()
        self.ops, self.flops = 0, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.ops += 1
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=out)
        return out


class WorkClock:
    """``CpuTimer.time`` in units of work: ``OP_COST_S`` per operator plus FLOPs at ``FLOP_RATE``."""

    def time(self, fn: Callable[[], Any]) -> float:
        with _WorkCounter() as counter:
            fn()
        return OP_COST_S * counter.ops + counter.flops / FLOP_RATE
