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

The rules that decide what a cell is and in which order cases are listed live here once, for this summary and the
dashboard's pages alike: :func:`fastest_cells` (one cell per device, workload, shape and precision),
:func:`cell_speedups` (each cell against the baseline's cell of the same shape), :func:`is_scaled` (FP8, MX and
4-bit recipes, the precisions a payoff is asked of) and :func:`in_reading_order` (cases by workload, then by
FLOPs).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from fp8bench.core.shapes import parse_stored

BASELINE = "bf16"
# Unscaled precisions: everything else is a scaled low-precision recipe (FP8, MX, 4-bit).
UNSCALED = ("fp32", "tf32", "bf16", "fp16")
REFERENCE_BACKENDS = ("emulated",)
# The public contract's workloads in the order pages list them: the single GEMM first, communication last.
WORKLOAD_ORDER = ("gemm", "attention", "transformer_step", "grouped_gemm", "collective")
CELL = ["device_label", "workload", "shape", "precision"]
NEVER = "never within the measured shapes"
COLUMNS = ("device", "workload", "precision", "shapes", "pays_off_from", "speedup_there", "backend_there",
           "largest_shape", "speedup_at_largest", "sqnr_cost_db", "energy_ratio", "energy_note", "measured_at")


def is_scaled(precision: str) -> bool:
    """Whether ``precision`` is a scaled low-precision recipe (FP8, MX or 4-bit: a scale travels with the data),
    as opposed to a plain float type."""
    return precision not in UNSCALED


def case_size(flops: Any, shape: str) -> float:
    """The size a case is ordered by: its FLOPs where stored and positive, else the product of its shape's numbers
    (a pure collective does no arithmetic: its element count); NaN when the shape holds no number."""
    number = _number(flops)
    if number is not None and number > 0:
        return number
    values = [v for v in parse_stored(str(shape)).values() if isinstance(v, (int, float))]
    return float(math.prod(values)) if values else math.nan


def _sizes(frame: pd.DataFrame) -> list[float]:
    flops = frame["flops"] if "flops" in frame else pd.Series(math.nan, index=frame.index)
    return [case_size(f, s) for f, s in zip(flops, frame["shape"], strict=True)]


def in_reading_order(frame: pd.DataFrame, first: tuple[str, ...] = ("device_label",)) -> pd.DataFrame:
    """``frame``'s rows in the order pages list cases: by the ``first`` columns, then workload (the contract's
    order, unknown names after it), then size (:func:`case_size`: FLOPs), then shape text."""
    if frame.empty:
        return frame
    rank = frame["workload"].map({w: i for i, w in enumerate(WORKLOAD_ORDER)}).fillna(len(WORKLOAD_ORDER))
    keyed = frame.assign(_rank=rank.to_numpy(), _size=_sizes(frame))
    order = [*first, "_rank", "workload", "_size", "shape"]
    return keyed.sort_values(order, kind="stable", na_position="last").drop(columns=["_rank", "_size"])


def fastest_cells(records: pd.DataFrame) -> pd.DataFrame:
    """One cell per (device, workload, shape, precision): the backend with the lowest end-to-end median among the
    vendor and custom kernels (the reference backends are left out), from speed-comparable records."""
    usable = records[~records["backend"].isin(REFERENCE_BACKENDS) & records["median_s"].notna()]
    return usable.sort_values("median_s", kind="stable").drop_duplicates(CELL)


def cell_speedups(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Every cell (:func:`fastest_cells`) that has a baseline cell at the same device, workload and shape, with
    ``median_s_base``, ``speedup`` (baseline end-to-end time / this cell's: above 1 the cell is faster) and
    ``speedup_prequant`` (the same for the pre-quantized time; the baseline's end-to-end time where it has no
    pre-quantized one, as in the run table), in reading order."""
    cells = fastest_cells(records)
    base = cells[cells["precision"] == baseline]
    base = base[[*CELL[:3], "median_s", "prequant_median_s"]].rename(
        columns={"median_s": "median_s_base", "prequant_median_s": "prequant_median_s_base"})
    merged = cells.merge(base, on=CELL[:3])
    merged["speedup"] = merged["median_s_base"] / merged["median_s"]
    base_pre = merged["prequant_median_s_base"].fillna(merged["median_s_base"])
    merged["speedup_prequant"] = base_pre / merged["prequant_median_s"]
    return in_reading_order(merged, ("device_label",))


def payoff_table(records: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """The payoff summary (see the module docstring) of speed-comparable records (one per case, latest), with
    columns ``device_label, workload, shape, shape_label, precision, backend, median_s, flops, sqnr_db,
    energy_j, energy_reason``."""
    cells = fastest_cells(records)
    rows = []
    for (device, workload), group in cells.groupby(["device_label", "workload"], sort=True):
        base = group[group["precision"] == baseline].set_index("shape")
        for precision, recipe in group[group["precision"].map(is_scaled)].groupby("precision", sort=True):
            paired = in_reading_order(recipe[recipe["shape"].isin(base.index)], first=())
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
