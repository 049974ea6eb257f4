"""Devices: ``auto``, ``cpu``, ``cuda`` and ``cuda:N``.

The CPU is a first-class device and the default when no GPU is present. CUDA specifics (synchronization, device
properties, which GPU is *current*) stay in this module and :mod:`fp8bench.measure.timing`, so the rest of the harness
never branches on the device kind except through them.

The current CUDA device
-----------------------
CUDA calls that name no device act on the thread's *current* device, which is ``cuda:0`` until something changes
it: ``torch.cuda.current_stream()`` (where an unbound ``torch.cuda.Event.record()`` records), ``torch.empty(...,
device="cuda")``, ``torch.cuda.synchronize()``, and the stream and graph a capture uses. A tensor on ``cuda:1`` runs
its kernels on cuda:1's current stream whatever the current device is, so with ``--device cuda:1`` and no guard the
work runs on cuda:1 while events record on cuda:0's idle stream and time nothing. :meth:`Device.guard` makes the
case's GPU current for the duration of a block (``torch.cuda.device``, restored on exit, unlike the process-wide
``torch.cuda.set_device``); the runner measures every case under it.
"""

from __future__ import annotations

import contextlib
import functools
import platform
import re
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


class DeviceError(ValueError):
    """A device spec that is malformed or names hardware this machine lacks."""


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's brand string (``AMD EPYC 9654 96-Core Processor``), or the platform's processor name."""
    try:
        import cpuinfo

        brand = cpuinfo.get_cpu_info().get("brand_raw")
        if brand:
            return str(brand)
    except Exception:  # cpuinfo can fail inside odd containers; fall back below
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass(frozen=True)
class Device:
    kind: str  # cpu | cuda
    index: int | None = None

    @property
    def torch(self) -> torch.device:
        return torch.device(self.kind if self.index is None else f"{self.kind}:{self.index}")

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    def name(self) -> str:
        """Exact marketing name (``NVIDIA H100 80GB HBM3``) on CUDA; the CPU model string on the CPU."""
        if self.is_cuda:
            return torch.cuda.get_device_name(self.index or 0)
        return cpu_model()

    @property
    def cuda_index(self) -> int:
        """The CUDA ordinal (``cuda`` without an index means ``cuda:0``, as :func:`resolve_device` resolves it)."""
        if not self.is_cuda:
            raise ValueError(f"device {self} is not a CUDA device")
        return self.index or 0

    def guard(self) -> AbstractContextManager[Any]:
        """Make this GPU the current CUDA device inside a ``with`` block (see the module docstring); on the CPU a
        no-op."""
        return torch.cuda.device(self.cuda_index) if self.is_cuda else contextlib.nullcontext()

    def synchronize(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.torch)

    def capability(self) -> tuple[int, int] | None:
        return torch.cuda.get_device_capability(self.index or 0) if self.is_cuda else None


_SPEC = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


def resolve_device(spec: str = "auto") -> Device:
    """Parse ``spec`` and check the hardware exists. ``auto`` picks ``cuda:0`` if CUDA works, else ``cpu``."""
    m = _SPEC.match(spec.strip().lower())
    if not m:
        raise DeviceError(f"unknown device {spec!r}; accepted: auto, cpu, cuda, cuda:N")
    kind, index = m.group(1), m.group(2)
    if kind == "auto":
        return Device("cuda", 0) if torch.cuda.is_available() else Device("cpu")
    if kind == "cpu":
        if index is not None:
            raise DeviceError(f"device {spec!r}: the CPU takes no index; use 'cpu'")
        return Device("cpu")
    if not torch.cuda.is_available():
        raise DeviceError(f"device {spec!r} requested but CUDA is not available on this machine "
                          f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}); use --device cpu")
    i = int(index or 0)
    count = torch.cuda.device_count()
    if i >= count:
        raise DeviceError(f"device {spec!r}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}")
    return Device("cuda", i)
