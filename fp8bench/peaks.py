"""Peaks: the ceilings that turn a TFLOP/s figure into a percentage.

On GPUs the ceilings come from a versioned table (``data/device_peaks.json``) of dense tensor-core TFLOPS per dtype
and memory bandwidth, keyed by the exact device name and each value tagged with its source. Vendor "with sparsity"
figures are halved there; values nobody could confirm carry ``unconfirmed``.

A CPU has no honest datasheet figure for PyTorch's kernels, so its ceilings are **measured**: the best of a few
large FP32 and BF16 matmuls and a large copy, cached per host, CPU model, thread count and torch version under
the results folder. FP8 and FP16 on the CPU are compared against the BF16 ceiling (the fastest matmul the CPU
offers), so a percentage there answers "how close to the best dense GEMM this CPU runs".
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from fp8bench.devices import Device, cpu_model
from fp8bench.environment import host_alias
from fp8bench.recipes import FloatPrecision, Fp8Recipe, Granularity, Precision
from fp8bench.runfile import atomic_write_bytes


@dataclass(frozen=True)
class Peak:
    value: float  # TFLOPS for compute, TB/s for bandwidth
    source: str
    unconfirmed: bool = False


@lru_cache(maxsize=1)
def device_table() -> dict[str, Any]:
    return json.loads(resources.files("fp8bench").joinpath("data/device_peaks.json").read_text())


def peak_key(precision: Precision) -> str:
    """Which column of the table a precision's GEMM is held to."""
    if isinstance(precision, Fp8Recipe):
        if precision.is_fp4:
            return "fp4"  # FP4 tensor-core rate; the table has no fp4 column yet, so no percentage of peak
        return "mxfp8" if precision.granularity is Granularity.MX else "fp8"
    assert isinstance(precision, FloatPrecision)
    return {"float32": "tf32" if precision.tf32 else "fp32", "bfloat16": "bf16", "float16": "fp16"}[
        precision.dtype_name]


def table_peak(device_name: str, key: str) -> Peak | None:
    table = device_table()
    entry = table["devices"].get(device_name, {}).get(key)
    if entry is None and key == "mxfp8":  # MX runs at the FP8 rate where the table says nothing else
        entry = table["devices"].get(device_name, {}).get("fp8")
    if entry is None:
        return None
    return Peak(float(entry[0]), table["sources"][entry[1]], len(entry) > 2 and entry[2] == "unconfirmed")


# --- measured CPU ceilings -------------------------------------------------------------------------------------

CEILING_N = 2048  # big enough to leave the cache and reach the matmul's steady rate on a server core
_COPY_BYTES = 256 * 2**20  # far above any CPU's last-level cache


def _best_seconds(fn: Any, repeats: int = 5) -> float:
    fn()  # warm-up: thread pool and allocator
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_cpu_ceilings() -> dict[str, Any]:
    """Best-of-5 FP32 and BF16 matmul TFLOP/s at 2048^3 and copy bandwidth (TB/s, read + write)."""
    n = CEILING_N
    out: dict[str, Any] = {}
    for key, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        out[key] = 2 * n**3 / _best_seconds(lambda a=a, b=b: a @ b) / 1e12
    src = torch.empty(_COPY_BYTES // 4)
    dst = torch.empty_like(src)
    out["mem_bw"] = 2 * _COPY_BYTES / _best_seconds(lambda: dst.copy_(src)) / 1e12
    out["method"] = f"measured: best of 5, {n}^3 matmul, {_COPY_BYTES >> 20} MiB copy"
    return out


def cpu_ceilings(cache_dir: Path | None) -> dict[str, Any]:
    """Measured CPU ceilings, read from or written to ``cache_dir/cpu_ceilings.json``."""
    key = f"{host_alias()}|{cpu_model()}|threads={torch.get_num_threads()}|torch={torch.__version__}"
    path = cache_dir / "cpu_ceilings.json" if cache_dir else None
    cache: dict[str, Any] = {}
    if path and path.exists():
        try:
            cache = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            cache = {}  # a damaged cache is remeasured, never trusted
    if key not in cache:
        cache[key] = measure_cpu_ceilings()
        if path:
            # A temporary file of its own, renamed over the cache: CPU workers of one run (--devices cpu,cpu)
            # measure and write their ceilings at the same moment. An unwritable cache only costs a remeasurement.
            with contextlib.suppress(OSError):
                atomic_write_bytes(path, json.dumps(cache, indent=1).encode())
    return cache[key]


class Peaks:
    """Compute and bandwidth ceilings of one device."""

    def __init__(self, device: Device, device_name: str, cache_dir: Path | None = None) -> None:
        self.device, self.device_name, self.cache_dir = device, device_name, cache_dir
        self._cpu: dict[str, Any] | None = None

    def _cpu_ceilings(self) -> dict[str, Any]:
        if self._cpu is None:
            self._cpu = cpu_ceilings(self.cache_dir)
        return self._cpu

    def compute(self, precision: Precision) -> Peak | None:
        key = peak_key(precision)
        if self.device.is_cuda:
            return table_peak(self.device_name, key)
        ceilings = self._cpu_ceilings()
        ref = "fp32" if key in ("fp32", "tf32") else "bf16"
        return Peak(ceilings[ref], f"{ceilings['method']} ({ref} matmul ceiling)")

    def bandwidth(self) -> Peak | None:
        if self.device.is_cuda:
            return table_peak(self.device_name, "mem_bw")
        ceilings = self._cpu_ceilings()
        return Peak(ceilings["mem_bw"], ceilings["method"])
