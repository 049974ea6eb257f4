"""Device memory for the layer workloads: what is free before a case, and the high-water mark during a call.

Every workload's memory is known in closed form well enough to refuse a case that cannot fit *before* allocating
it (:func:`refusal`: a workload's estimate against :func:`available_bytes`): on the CPU an allocation larger than
RAM does not fail cleanly, the kernel's out-of-memory killer ends the whole process and every later case with it,
and on a GPU a 40 GB request would fail only after the run had spent its time building the case.

Peak memory comes from PyTorch's CUDA caching allocator (``torch.cuda.max_memory_allocated``). The CPU allocator
keeps no such statistics, so on the CPU the peak is reported as unknown with that reason, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from fp8bench.core.devices import Device

# Outputs the output check (fp8bench.measure.output_check) holds beside the call's own, at most: the fresh call's
# copy, the last timed output kept while the next call writes its own, and the copy of it taken after sampling.
CHECKED_OUTPUTS = 3


def available_bytes(device: Device) -> int | None:
    """Bytes a case may still allocate on ``device``: free GPU memory, or the kernel's ``MemAvailable`` estimate
    on the CPU; ``None`` where neither can be read."""
    if device.is_cuda:
        free, _total = torch.cuda.mem_get_info(device.torch)
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # the file states kB (KiB)
    except OSError:
        return None
    return None


def refusal(device: Device, need_bytes: int, subject: str, contents: str, bound: str = "about") -> str | None:
    """The out-of-memory refusal of a case needing ``need_bytes`` on ``device`` (``None`` when it fits or free
    memory cannot be read): ``subject`` needs ``bound`` N GiB (``contents``), M GiB available."""
    have = available_bytes(device)
    if have is None or need_bytes <= have:
        return None
    return (f"out of memory on {device}: {subject} needs {bound} {need_bytes / 2**30:.1f} GiB ({contents}), "
            f"{have / 2**30:.1f} GiB available")


@dataclass
class PeakMemory:
    bytes: int | None = None
    reason: str | None = None

    def fields(self) -> dict[str, object]:
        """Record extras: ``peak_memory_bytes`` and, when it is unknown, ``peak_memory_reason``."""
        out: dict[str, object] = {"peak_memory_bytes": self.bytes}
        if self.reason:
            out["peak_memory_reason"] = self.reason
        return out


@contextmanager
def peak_memory(device: Device) -> Iterator[PeakMemory]:
    """Measure the allocator's high-water mark over the ``with`` body (bytes, CUDA only)."""
    result = PeakMemory()
    if not device.is_cuda:
        result.reason = "the CPU allocator keeps no peak statistics"
        yield result
        return
    torch.cuda.synchronize(device.torch)
    torch.cuda.reset_peak_memory_stats(device.torch)
    yield result
    torch.cuda.synchronize(device.torch)
    result.bytes = int(torch.cuda.max_memory_allocated(device.torch))
