"""The GPU peak table: the published ceilings a GPU's TFLOP/s and TB/s are held to, and the rule that flags a
percentage of peak above 100.

``data/device_peaks.json`` holds, per exact device name, the dense tensor-core TFLOPS per column (``fp32``,
``tf32``, ``bf16``, ``fp16``, ``fp8``, ``mxfp8``) and the memory bandwidth (``mem_bw``, TB/s), each value tagged
with its source; vendor "with sparsity" figures are halved there and values nobody could confirm carry
``unconfirmed``. Which column a precision is held to is :func:`fp8bench.hardware.peaks.peak_key`.

This module needs neither torch nor a device: the dashboard and the reports read stored records with it, and a
reader must not pay for importing torch (over a second of CPU) to look up a number in a table. The CPU's
ceilings, which must be measured with torch, live in :mod:`fp8bench.hardware.peaks`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Peak:
    value: float  # TFLOPS for compute, TB/s for bandwidth
    source: str
    unconfirmed: bool = False


@lru_cache(maxsize=1)
def device_table() -> dict[str, Any]:
    return json.loads(resources.files("fp8bench.core").joinpath("data/device_peaks.json").read_text())


def table_peak(device_name: str, key: str) -> Peak | None:
    """The table's ceiling of ``device_name`` for column ``key``, or ``None`` where the table has no value."""
    table = device_table()
    entry = table["devices"].get(device_name, {}).get(key)
    if entry is None and key == "mxfp8":  # MX runs at the FP8 rate where the table says nothing else
        entry = table["devices"].get(device_name, {}).get("fp8")
    if entry is None:
        return None
    return Peak(float(entry[0]), table["sources"][entry[1]], len(entry) > 2 and entry[2] == "unconfirmed")


def above_ceiling(pct_of_peak: float | None) -> bool:
    """A percentage of peak above 100: no kernel beats its ceiling, so the ceiling is wrong (a CPU ceiling measured
    under load, a missing or wrong row of the device table) or the timer is."""
    return pct_of_peak is not None and pct_of_peak > 100


def ceiling_advice(device: str) -> str:
    """What to do about a ceiling that a measurement exceeded, on ``device`` (``cpu``, ``cuda:0``, ...)."""
    if str(device).startswith("cpu"):
        return ("Re-measure the CPU's ceilings on a quiet machine: `fp8bench selfcheck --check cpu_ceiling` "
                "(a measurement under load is never cached)")
    return ("Check the device table's row for this GPU (fp8bench/core/data/device_peaks.json, each value with its "
            "source) and the timer: `fp8bench selfcheck`")
