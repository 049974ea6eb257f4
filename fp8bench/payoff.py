"""Where FP8 pays off: per device and workload, the smallest shape from which each scaled recipe beats BF16.

FP8 (and 4-bit) GEMMs do less work per element but pay for it with quantization: find each tensor's absolute
maximum, compute a scale, cast, and often rescale the output. On small shapes that fixed cost dominates and the
recipe loses; as shapes grow the GEMM dominates and, on hardware with fast FP8 units, the recipe wins. The answer
users want is the crossover: "from which shape on does it pay?", end to end, quantization included.

For each device, workload and recipe, over the shapes measured with both the recipe and the baseline (BF16), in
order of FLOPs, this module reports:

* **pays off from**: the smallest shape from which the recipe is faster than the baseline at every larger measured
  shape (a win at one small shape followed by losses is not a payoff); "never within the measured shapes" when the
  largest shape loses, as on a CPU without FP8 units. A win must stand clear of the measurement noise: the recipe's
  upper quartile of samples below the baseline's lower quartile (medians -/+ half the IQR), so that a baseline
  measured on a busy machine (a median with a wide spread) cannot make a recipe "pay off" by chance;
* the **speedup** (baseline time / recipe time, end to end) there and at the largest shape measured;
* the **SQNR cost** in dB (baseline SQNR minus the recipe's: what the speed costs in accuracy) and the **energy
  per iteration** against the baseline's, at the payoff shape (at the largest shape when it never pays off);
  energy is empty with its reason where no meter exists.

Each cell takes the fastest backend of that precision at that shape, among vendor and custom kernels: the
``emulated`` backend is a quantize-dequantize reference, never a way to run a model, so it is left out. Records
are the latest valid, non-interpreted measurement of each case.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

BASELINE = "bf16"
# Unscaled precisions: everything else is a scaled low-precision recipe (FP8, MX, 4-bit).
UNSCALED = ("fp32", "tf32", "bf16", "fp16")
REFERENCE_BACKENDS = ("emulated",)
NEVER = "never within the measured shapes"
COLUMNS = ("device", "workload", "precision", "shapes", "pays_off_from", "speedup_there", "backend_there",
           "largest_shape", "speedup_at_largest", "sqnr_cost_db", "energy_ratio", "energy_note", "measured_at")


def _size(row: Any) -> float:
    """FLOPs of the case, or the product of its shape's numbers when FLOPs were not stored."""
    flops = row.get("flops")
    if flops is not None and not (isinstance(flops, float) and math.isnan(flops)) and flops > 0:
        return float(flops)
    parts = [p.split("=", 1)[1] for p in str(row.get("shape", "")).split(",") if "=" in p]
    product = 1.0
    for part in parts:
        try:
            product *= float(part)
        except ValueError:
            return math.nan
    return product


def _fastest(records: pd.DataFrame) -> pd.DataFrame:
    """One row per (device, workload, shape, precision): the backend with the lowest end-to-end median."""
    ranked = records.sort_values("median_s", kind="stable")
    return ranked.drop_duplicates(["device_label", "workload", "shape", "precision"])


def payoff_table(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """The payoff summary (see the module docstring) of speed-comparable records (one per case, latest), with
    columns ``device_label, workload, shape, shape_label, precision, backend, median_s, flops, sqnr_db,
    energy_j, energy_reason``."""
    usable = records[~records["backend"].isin(REFERENCE_BACKENDS) & records["median_s"].notna()]
    if usable.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    cells = _fastest(usable).copy()
    cells["size"] = [_size(r) for r in cells.to_dict("records")]
    rows = []
    for (device, workload), group in cells.groupby(["device_label", "workload"], sort=True):
        base = group[group["precision"] == baseline].set_index("shape")
        for precision, recipe in group[~group["precision"].isin(UNSCALED)].groupby("precision", sort=True):
            paired = recipe[recipe["shape"].isin(base.index)].sort_values(["size", "shape"])
            if paired.empty:
                continue
            rows.append(_summary(str(device), str(workload), str(precision), paired, base))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _half_iqr(row: Any) -> float:
    """Half the interquartile range of a record's samples, s (0 where it was not stored)."""
    return (_number(row.get("iqr_s")) or 0.0) / 2


def _wins(base: Any, recipe: Any) -> bool:
    """The recipe is faster than the baseline beyond the noise: its samples' upper quartile (about median + IQR/2)
    is below the baseline's lower quartile (about median - IQR/2)."""
    return float(recipe["median_s"]) + _half_iqr(recipe) < float(base["median_s"]) - _half_iqr(base)


def _summary(device: str, workload: str, precision: str, paired: pd.DataFrame, base: pd.DataFrame) -> dict[str, Any]:
    speedups = [float(base.at[s, "median_s"]) / float(t) for s, t in zip(paired["shape"], paired["median_s"],
                                                                          strict=True)]
    wins = [_wins(base.loc[r["shape"]], r) for r in paired.to_dict("records")]
    start = len(speedups)
    while start > 0 and wins[start - 1]:
        start -= 1
    pays = start < len(speedups)
    at = paired.iloc[start] if pays else paired.iloc[-1]
    b = base.loc[at["shape"]]
    sqnr_cost = _minus(b.get("sqnr_db"), at.get("sqnr_db"))
    energy_ratio, energy_note = _energy(b, at)
    return {"device": device, "workload": workload, "precision": precision, "shapes": len(speedups),
            "pays_off_from": at["shape_label"] if pays else NEVER,
            "speedup_there": speedups[start] if pays else None,
            "backend_there": at["backend"] if pays else None,
            "largest_shape": paired.iloc[-1]["shape_label"], "speedup_at_largest": speedups[-1],
            "sqnr_cost_db": sqnr_cost, "energy_ratio": energy_ratio, "energy_note": energy_note,
            "measured_at": at["shape_label"]}


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def _minus(a: Any, b: Any) -> float | None:
    x, y = _number(a), _number(b)
    return None if x is None or y is None else x - y


def _energy(base: pd.Series, recipe: pd.Series) -> tuple[float | None, str | None]:
    """Recipe joules per iteration / baseline joules per iteration, or ``None`` with the reason."""
    b, r = _number(base.get("energy_j")), _number(recipe.get("energy_j"))
    if b is not None and r is not None and b > 0:
        return r / b, None
    reason = recipe.get("energy_reason") or base.get("energy_reason")
    if isinstance(reason, float) and math.isnan(reason):
        reason = None
    return None, f"no energy measurement: {reason}" if reason else "no energy measurement stored"
