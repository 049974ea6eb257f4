"""Speedups of the dashboard's records, computed by the same arithmetic as the run table (``fp8bench.analysis.report``).

The store keeps one row per record with the shape as text; :func:`speedup_frame` turns rows back into the record
dicts that :func:`fp8bench.analysis.report.baseline_index` and :func:`fp8bench.analysis.report.speedups` expect, keyed
by the device *model* so that two GPU models never share a baseline.
"""

from __future__ import annotations

import pandas as pd

from fp8bench.analysis.report import baseline_index, speedups
from fp8bench.core.shapes import parse_stored

_FIELDS = ("workload", "precision", "backend", "status", "median_s", "prequant_median_s")


def speedup_frame(records: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """``records`` plus ``speedup_e2e`` and ``speedup_prequant`` (baseline time / this time; >1 is faster)."""
    dicts = records[[*_FIELDS, "shape", "device_label"]].to_dict("records")
    for d in dicts:
        d["shape"] = parse_stored(d["shape"])
        d["device"] = d.pop("device_label")
        for key in ("median_s", "prequant_median_s"):  # NaN from the frame means "not measured" in the record
            if pd.isna(d[key]):
                d[key] = None
    index = baseline_index(dicts, baseline)
    pairs = [speedups(d, index) for d in dicts]
    out = records.copy()
    out["speedup_e2e"] = [p[0] for p in pairs]
    out["speedup_prequant"] = [p[1] for p in pairs]
    return out
