"""What a run's report computes from its records: the speedups against the baseline precision (the run table and
the dashboard show the same numbers) and the count of each status. The table itself is drawn by
:mod:`fp8bench.render.run_table`.

Speedup of a record = baseline precision's end-to-end median / this record's end-to-end median, for the same
workload, shape, device and backend (falling back to the ``torch`` backend's baseline when this backend has none),
so ``2.0x`` means twice as fast as BF16 *including* quantization. The pre-quantized speedup (the number vendors
quote) sits next to it.
"""

from __future__ import annotations

from typing import Any

from fp8bench.core.shapes import label, shape_label


def shape_text(shape: dict[str, int]) -> str:
    """A record's shape for people: ``MxNxK`` for a GEMM, else its canonical text (:mod:`fp8bench.core.shapes`)."""
    return shape_label(label(shape))


def baseline_index(records: list[dict[str, Any]], baseline: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The ``baseline`` precision's measured records by (workload, shape, device, backend): what :func:`speedups`
    divides by."""
    index = {}
    for r in records:
        if r["precision"] == baseline and r["status"] == "ok" and r.get("median_s"):
            index[(r["workload"], shape_text(r["shape"]), r["device"], r["backend"])] = r
    return index


def speedups(record: dict[str, Any], index: dict[tuple[Any, ...], dict[str, Any]]) -> tuple[float | None, float | None]:
    """(end-to-end speedup, pre-quantized speedup) of ``record`` against the baseline, or ``None``s."""
    if record["status"] not in ("ok", "invalid") or not record.get("median_s"):
        return None, None
    if record.get("interpreted"):  # interpreter timings (Triton on the CPU) are never compared on speed
        return None, None
    key = (record["workload"], shape_text(record["shape"]), record["device"])
    base = index.get((*key, record["backend"])) or index.get((*key, "torch"))
    if base is None:
        return None, None
    e2e = base["median_s"] / record["median_s"]
    base_pre = base.get("prequant_median_s") or base["median_s"]
    pre = base_pre / record["prequant_median_s"] if record.get("prequant_median_s") else None
    return e2e, pre


def summary_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    """How many records have each status (``ok``, ``skipped``, ``failed``, ``invalid``; zero ones included)."""
    counts = {s: 0 for s in ("ok", "skipped", "failed", "invalid")}
    for r in records:
        counts[r["status"]] += 1
    return counts

