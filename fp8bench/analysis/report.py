"""What a run's report computes from its records: the speedups against the baseline precision (the run table and
the dashboard show the same numbers) and the count of each status. The table itself is drawn by
:mod:`fp8bench.render.run_table`.

Speedup of a record = baseline precision's end-to-end median / this record's end-to-end median, for the same
workload, shape, device and backend (falling back to the ``torch`` backend's baseline when this backend has none),
so ``2.0x`` means twice as fast as BF16 *including* quantization. The pre-quantized speedup (the number vendors
quote) sits next to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fp8bench.core.records import Record, fields_of
from fp8bench.core.shapes import label, shape_label


def shape_text(shape: dict[str, int]) -> str:
    """A record's shape for people: ``MxNxK`` for a GEMM, else its canonical text (:mod:`fp8bench.core.shapes`)."""
    return shape_label(label(shape))


# A record as the table's arithmetic reads it: typed, or a store frame's row of its fields (the dashboard's).
Timed = Record | Mapping[str, Any]
# What identifies a case's baseline: workload, shape text, device, backend.
BaselineKey = tuple[str, str, str, str]


def _timing(record: Timed) -> tuple[str, str, str, str, str, str, float | None, float | None, bool]:
    """The fields speedups are made of: workload, shape text, device, backend, precision, status, end-to-end and
    pre-quantized medians (s), interpreted."""
    workload, shape, device, backend, precision, status, median, prequant, interpreted = fields_of(
        record, "workload", "shape", "device", "backend", "precision", "status", "median_s", "prequant_median_s",
        "interpreted")
    return workload, shape_text(shape), device, backend, precision, status, median, prequant, bool(interpreted)


def baseline_index(records: Iterable[Timed], baseline: str) -> dict[BaselineKey, tuple[float, float | None]]:
    """The baseline precision's measured cases: (workload, shape, device, backend) -> its (end-to-end median,
    pre-quantized median), seconds."""
    index = {}
    for r in records:
        workload, shape, device, backend, precision, status, median, prequant, _ = _timing(r)
        if precision == baseline and status == "ok" and median:
            index[(workload, shape, device, backend)] = (median, prequant)
    return index


def speedups(record: Timed, index: dict[BaselineKey, tuple[float, float | None]]) -> tuple[float | None, float | None]:
    """(end-to-end speedup, pre-quantized speedup) of ``record`` against the baseline, or ``None``s."""
    workload, shape, device, backend, _, status, median, prequant, interpreted = _timing(record)
    if status not in ("ok", "invalid") or not median:
        return None, None
    if interpreted:  # interpreter timings (Triton on the CPU) are never compared on speed
        return None, None
    base = index.get((workload, shape, device, backend)) or index.get((workload, shape, device, "torch"))
    if base is None:
        return None, None
    base_median, base_prequant = base
    return base_median / median, (base_prequant or base_median) / prequant if prequant else None


def summary_counts(records: Iterable[Record | Mapping[str, Any]]) -> dict[str, int]:
    counts = {s: 0 for s in ("ok", "skipped", "failed", "invalid")}
    for r in records:
        counts[fields_of(r, "status")[0]] += 1
    return counts

