"""Peaks: the ceilings that turn a TFLOP/s figure into a percentage.

On GPUs the ceilings come from a versioned table of dense tensor-core TFLOPS per dtype and memory bandwidth
(:mod:`fp8bench.core.peak_table`, which needs no torch, so readers of stored records use it alone); this module
says which column a precision is held to (:func:`peak_key`).

A CPU has no honest datasheet figure for PyTorch's kernels, so its ceilings are **measured**: the best of a few
large FP32 and BF16 matmuls and a large copy, cached per host, CPU model, thread count and torch version under
the results folder. FP8 and FP16 on the CPU are compared against the BF16 ceiling (the fastest matmul the CPU
offers), so a percentage there answers "how close to the best dense GEMM this CPU runs".

A ceiling measured while other processes held the cores is too low, and every percentage against it too high
(above 100%). So each measurement records the load it was taken at (:mod:`fp8bench.core.noise`); one taken with the
load above the CPU count is used for its own run but never cached, a cached one is measured again when it is a
week old or carries no load, and ``fp8bench selfcheck`` measures afresh and caches what it measured on a quiet
machine. A percentage above 100 is flagged wherever it is shown
(:func:`fp8bench.core.peak_table.above_ceiling`).
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import torch

from fp8bench.core.devices import Device, cpu_model
from fp8bench.core.noise import HostLoad, host_load
from fp8bench.core.peak_table import Peak, table_peak
from fp8bench.core.precisions import FloatPrecision, Precision, ScaledRecipe
from fp8bench.hardware.environment import host_alias
from fp8bench.results.runfile import atomic_write_bytes


def peak_key(precision: Precision) -> str:
    """Which column of the table a precision's GEMM is held to."""
    if isinstance(precision, ScaledRecipe):
        if precision.element_bits == 4:
            return "fp4"  # FP4 tensor-core rate; the table has no fp4 column yet, so no percentage of peak
        return "mxfp8" if precision.mxfp8() else "fp8"
    assert isinstance(precision, FloatPrecision)
    return {"float32": "tf32" if precision.tf32 else "fp32", "bfloat16": "bf16", "float16": "fp16"}[
        precision.dtype_name]


# --- measured CPU ceilings -------------------------------------------------------------------------------------

CEILING_N = 2048  # big enough to leave the cache and reach the matmul's steady rate on a server core
_COPY_BYTES = 256 * 2**20  # far above any CPU's last-level cache
# Cached ceilings older than this are measured again: a torch, BIOS or governor update changes them over weeks,
# and measuring takes a few seconds.
CEILING_MAX_AGE = timedelta(days=7)


def _best_seconds(fn: Any, repeats: int = 5) -> float:
    fn()  # warm-up: thread pool and allocator
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_cpu_rates(n: int, copy_bytes: int) -> dict[str, float]:
    """Best-of-5 FP32 and BF16 matmul rates at ``n``^3 (``fp32``, ``bf16``: TFLOP/s) and the bandwidth of a copy of
    ``copy_bytes`` (``mem_bw``: TB/s, read + write), on torch's current thread count."""
    out: dict[str, float] = {}
    for key, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        out[key] = 2 * n**3 / _best_seconds(lambda a=a, b=b: a @ b) / 1e12
    src = torch.empty(copy_bytes // 4)
    dst = torch.empty_like(src)
    out["mem_bw"] = 2 * copy_bytes / _best_seconds(lambda: dst.copy_(src)) / 1e12
    return out


def measure_cpu_ceilings() -> dict[str, Any]:
    """The rates of :func:`measure_cpu_rates` at 2048^3 and a 256 MiB copy, with when and under what load
    (:mod:`fp8bench.core.noise`) they were measured."""
    load = host_load()
    n = CEILING_N
    out: dict[str, Any] = dict(measure_cpu_rates(n, _COPY_BYTES))
    out["measured_at"] = datetime.now(timezone.utc).isoformat()
    out["load"] = load.to_dict() if load else None
    out["method"] = (f"measured {out['measured_at'][:10]}"
                     + (f" at {load.describe()}" if load else "")
                     + f": best of 5, {n}^3 matmul, {_COPY_BYTES >> 20} MiB copy")
    return out


def ceiling_staleness(entry: dict[str, Any], now: datetime | None = None) -> str | None:
    """Why a cached ceiling must be measured again, or ``None`` when it can be used: it carries no record of its
    load (written before loads were recorded), it was measured under load, or it is older than
    :data:`CEILING_MAX_AGE`."""
    load = HostLoad.from_dict(entry.get("load"))
    if load is None:
        return "no load recorded with it"
    if load.overloaded:
        return f"measured at {load.describe()}"
    try:
        measured = datetime.fromisoformat(str(entry.get("measured_at")))
    except ValueError:
        return "no measurement time recorded with it"
    if measured.tzinfo is None:
        measured = measured.replace(tzinfo=timezone.utc)
    age = (now or datetime.now(timezone.utc)) - measured
    if age > CEILING_MAX_AGE:
        return f"measured {age.days} days ago (re-measured after {CEILING_MAX_AGE.days})"
    return None


def _measured_quiet(entry: dict[str, Any]) -> bool:
    load = HostLoad.from_dict(entry.get("load"))
    return load is not None and not load.overloaded


def _read_cache(path: Path | None) -> dict[str, Any]:
    if not path or not path.exists():
        return {}
    try:
        cache = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}  # a damaged cache is remeasured, never trusted
    return cache if isinstance(cache, dict) else {}


# Ceilings measured under load by this process, by key: used again by its later runs while the load lasts.
_THIS_PROCESS: dict[str, dict[str, Any]] = {}


def _ceiling_key() -> str:
    """What a cached ceiling is valid for: this host, CPU model, torch's thread count and torch release."""
    return f"{host_alias()}|{cpu_model()}|threads={torch.get_num_threads()}|torch={torch.__version__}"


def cached_cpu_ceilings(cache_dir: Path | None) -> dict[str, Any] | None:
    """This CPU's ceilings from ``cache_dir/cpu_ceilings.json`` without measuring anything (``None``: none cached),
    for estimates made before a run (:mod:`fp8bench.measure.plan`)."""
    entry = _read_cache(cache_dir / "cpu_ceilings.json" if cache_dir else None).get(_ceiling_key())
    return entry if isinstance(entry, dict) else None


def cpu_ceilings(cache_dir: Path | None, refresh: bool = False) -> dict[str, Any]:
    """Measured CPU ceilings, read from or written to ``cache_dir/cpu_ceilings.json``.

    A cached entry is used unless ``refresh`` or :func:`ceiling_staleness` says otherwise. A measurement taken with
    the load above the CPU count is used for this process only and never cached; while the machine is loaded, an
    old but quiet cached entry is kept rather than replaced by a loaded one. The returned entry's ``cached`` says
    whether it is in the cache now, and a fresh one's ``measured_because`` why it was measured.
    """
    key = _ceiling_key()
    path = cache_dir / "cpu_ceilings.json" if cache_dir else None
    cache = _read_cache(path)
    entry = cache.get(key) if isinstance(cache.get(key), dict) else None
    stale = None if entry is None else ceiling_staleness(entry)
    if entry is not None and stale is None and not refresh:
        return {**entry, "cached": True}
    load = host_load()
    if entry is not None and _measured_quiet(entry) and load is not None and load.overloaded and not refresh:
        return {**entry, "cached": True, "method": f"{entry['method']} (not re-measured at {load.describe()})"}
    if load is not None and load.overloaded and key in _THIS_PROCESS and not refresh:
        return _THIS_PROCESS[key]  # still loaded: this process's own loaded measurement, not another one
    fresh = {**measure_cpu_ceilings(),
             "measured_because": "asked to refresh" if refresh else stale or "none cached for this host"}
    measured_load = HostLoad.from_dict(fresh["load"])
    if measured_load is not None and measured_load.overloaded:
        loaded = {**fresh, "cached": False, "method": f"{fresh['method']}; not cached: measured under load"}
        # Kept for the rest of this process: a long-lived A/B worker runs many runs, and measuring the ceilings
        # again for each (seconds under load) would make its rounds mostly ceiling measurements.
        _THIS_PROCESS[key] = loaded
        return loaded
    if path:
        cache[key] = fresh
        # A temporary file of its own, renamed over the cache: CPU workers of one run (--devices cpu,cpu)
        # measure and write their ceilings at the same moment. An unwritable cache only costs a remeasurement.
        with contextlib.suppress(OSError):
            atomic_write_bytes(path, json.dumps(cache, indent=1).encode())
            return {**fresh, "cached": True}
    return {**fresh, "cached": False}


class Peaks:
    """Compute and bandwidth ceilings of one device."""

    def __init__(self, device: Device, device_name: str, cache_dir: Path | None = None,
                 refresh: bool = False) -> None:
        """``refresh``: measure the CPU's ceilings now instead of reading the cache (and cache them when the
        machine is quiet), as ``fp8bench selfcheck`` does."""
        self.device, self.device_name, self.cache_dir, self.refresh = device, device_name, cache_dir, refresh
        self._cpu: dict[str, Any] | None = None

    def cpu_ceilings(self) -> dict[str, Any]:
        """The CPU's measured ceilings (:func:`cpu_ceilings`), measured or read once per instance."""
        if self._cpu is None:
            self._cpu = cpu_ceilings(self.cache_dir, self.refresh)
        return self._cpu

    def withheld(self) -> str | None:
        """Why this CPU has no ceiling to judge a case against, or ``None`` when it has one (or is a GPU): the
        only ceiling there is was measured under load, which lowers it (a kernel then reads above 100% of peak),
        and no quiet one is cached."""
        if self.device.is_cuda:
            return None
        load = HostLoad.from_dict(self.cpu_ceilings().get("load"))
        if load is None or not load.overloaded:
            return None
        return (f"no CPU ceiling: the only one was measured under load ({load.describe()}) and none measured on "
                "a quiet machine is cached; `fp8bench selfcheck --device cpu --check cpu_ceiling` on a quiet "
                "machine measures one")

    def compute(self, precision: Precision) -> Peak | None:
        """The compute ceiling for ``precision``: the device table's on a GPU, the measured matmul rate on a CPU
        (``None`` when :meth:`withheld`)."""
        key = peak_key(precision)
        if self.device.is_cuda:
            return table_peak(self.device_name, key)
        if self.withheld():
            return None
        ceilings = self.cpu_ceilings()
        ref = "fp32" if key in ("fp32", "tf32") else "bf16"
        return Peak(ceilings[ref], f"{ceilings['method']} ({ref} matmul ceiling)")

    def bandwidth(self) -> Peak | None:
        """The memory-bandwidth ceiling: the table's on a GPU, the measured copy rate on a CPU (``None`` when
        :meth:`withheld`)."""
        if self.device.is_cuda:
            return table_peak(self.device_name, "mem_bw")
        if self.withheld():
            return None
        ceilings = self.cpu_ceilings()
        return Peak(ceilings["mem_bw"], ceilings["method"])
