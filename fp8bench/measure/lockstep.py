"""Timing that keeps the ranks of a distributed run in step (:mod:`fp8bench.hardware.distributed` starts them).

The runner's decisions that depend on a rank's own clock (keep warming up? is the case's deadline past?) would drift
apart between ranks, and a collective that one rank skips leaves the others waiting forever. So a distributed run
times through a :class:`LockstepTimer`:

* **a barrier before each sample**, so every rank starts the timed call together (a rank still finishing the last
  sample would otherwise be counted in the next one of the others);
* **the sample is the maximum over ranks** (``all_reduce(MAX)``): a collective is done when its slowest rank is done.
  nccl-tests reduces its time across ranks too, by default as the average (``-a 1``); its ``-a 3`` is the maximum
  used here. Every rank then holds the same samples, so the sampler's stop rules decide the same on every rank;
* **decisions taken on a rank's clock are agreed** (:meth:`LockstepTimer.agree`: true on any rank is true on all),
  and a refusal on any rank (memory, say) is every rank's refusal (:meth:`LockstepTimer.agree_reason`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from fp8bench.core.devices import Device
from fp8bench.measure.timing import Timer


class LockstepTimer:
    """A :class:`~fp8bench.measure.timing.Timer` for a distributed run: barrier, the device's own timer, max over ranks.

    ``inner`` is the rank's timer (``perf_counter_ns`` on the CPU, CUDA events on a GPU). Small tensors for the
    reductions live on ``device``: NCCL reduces GPU tensors only.
    """

    def __init__(self, inner: Timer, device: Device) -> None:
        self.inner = inner
        self.device = device

    def _max(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=self.device.torch)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def _barrier(self) -> None:
        if self.device.is_cuda:
            dist.barrier(device_ids=[self.device.cuda_index])
        else:
            dist.barrier()

    def time(self, fn: Callable[[], Any]) -> float:
        self._barrier()
        return self._max(self.inner.time(fn))

    def agree(self, flag: bool) -> bool:
        """``flag`` as every rank takes it: true when it is true on any rank."""
        return self._max(1.0 if flag else 0.0) > 0

    def agree_reason(self, reason: str | None) -> str | None:
        """The first rank's refusal, as every rank's (``None`` when no rank refuses)."""
        reasons: list[str | None] = [None] * dist.get_world_size()
        dist.all_gather_object(reasons, reason)
        for rank, why in enumerate(reasons):
            if why:
                return why if rank == dist.get_rank() else f"rank {rank}: {why}"
        return None
