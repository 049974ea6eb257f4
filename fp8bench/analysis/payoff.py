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

What a cell is (:func:`fp8bench.analysis.selection.fastest_cells`: one per device, workload, shape and precision)
and which precisions a payoff is asked of (:func:`fp8bench.analysis.selection.is_scaled`: FP8, MX and 4-bit) are
shared selection rules (:mod:`fp8bench.analysis.selection`). The rules that compare cells and order cases live here
once, for this summary and the dashboard's pages alike: :func:`cell_speedups` (each cell against the baseline's
cell of the same shape) and :func:`in_reading_order` (cases by workload, then by FLOPs).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from fp8bench.analysis.selection import CELL, REFERENCE_BACKENDS, fastest_cells, is_scaled
from fp8bench.core.shapes import parse_stored

BASELINE = "bf16"
# The public contract's workloads in the order pages list them: the single GEMM first, communication last.
WORKLOAD_ORDER = ("gemm", "attention", "transformer_step", "grouped_gemm", "collective")
NEVER = "never within the measured shapes"
# The verdict of one row: the one answer the verb, the Payoff page and the Overview count alike.
PAYS_OFF = "pays off"
WITHIN_NOISE = "faster within the noise"
EMULATED_ONLY = "measured only on the emulated reference"
# Another unscaled precision this many times faster than the baseline, beyond the noise, at the largest shape both
# measured, marks the baseline as a slow path on that device (FP16 on a CPU without FP16 units runs far below
# FP32): speedups against it overstate every recipe.
SLOW_BASELINE_FACTOR = 1.5
COLUMNS = ("device", "workload", "precision", "verdict", "reason", "baseline_note", "shapes", "pays_off_from",
           "speedup_there", "backend_there", "largest_shape", "speedup_at_largest", "sqnr_cost_db", "energy_ratio",
           "energy_note", "measured_at")
# The record columns payoff_table reads.
SUMMARY_INPUTS = ("device_label", "workload", "shape", "shape_label", "precision", "backend", "median_s", "iqr_s",
                  "flops", "sqnr_db", "energy_j", "energy_reason")


def case_size(flops: Any, shape: str) -> float:
    """The size a case is ordered by: its FLOPs where stored and positive, else the product of its shape's numbers
    (a pure collective does no arithmetic: its element count); NaN when the shape holds no number."""
    number = _number(flops)
    if number is not None and number > 0:
        return number
    values = [v for v in parse_stored(str(shape)).values() if isinstance(v, (int, float))]
    return float(math.prod(values)) if values else math.nan


def shape_family(shape: str) -> str:
    """The named choices of a stored shape (``route=zipf``, ``op=all_gather``: its values that are not numbers), as
    ``key=value`` text; ``""`` for a shape of sizes alone. Cases of one family differ only in size, so a size curve
    joins them and nothing else."""
    return ",".join(f"{k}={v}" for k, v in parse_stored(str(shape)).items() if not isinstance(v, (int, float)))


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
    # Only the columns a summary reads: every selection below copies the columns it keeps, and a store's record
    # frame has dozens.
    cells = fastest_cells(records[[c for c in SUMMARY_INPUTS if c in records]])
    # One sort for every group: a grouping keeps its rows' order, so each device's and workload's rows stay by size.
    ordered = in_reading_order(cells, ("device_label",))
    rows = []
    for (device, workload), group in ordered.groupby(["device_label", "workload"], sort=True):
        base = group[group["precision"] == baseline].set_index("shape")
        note = slow_baseline_note(group, baseline)
        for precision, recipe in group[group["precision"].map(is_scaled)].groupby("precision", sort=True):
            paired = recipe[recipe["shape"].isin(base.index)]
            if paired.empty:
                continue
            rows.append({**_summary(str(device), str(workload), str(precision), paired, base),
                         "baseline_note": note})
    rows += _emulated_only(records, cells)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def paying_off(summary: pd.DataFrame) -> pd.DataFrame:
    """The rows of a :func:`payoff_table` whose recipe pays off: what every count of "recipes that pay off" reads."""
    return summary[summary["verdict"] == PAYS_OFF] if not summary.empty else summary


def slow_baseline_note(group: pd.DataFrame, baseline: str) -> str | None:
    """Why the ``baseline`` cells of one device and workload (``group``, :func:`fastest_cells` rows) run on a slow
    path, or ``None``: at the largest shape the baseline measured, another unscaled precision is more than
    :data:`SLOW_BASELINE_FACTOR` times faster beyond the noise."""
    base = in_reading_order(group[group["precision"] == baseline], first=())
    if base.empty:
        return None
    last = base.iloc[-1]
    others = group[(group["shape"] == last["shape"]) & ~group["precision"].map(is_scaled)
                   & (group["precision"] != baseline)]
    for other in others.to_dict("records"):
        factor = float(last["median_s"]) / float(other["median_s"])
        if factor > SLOW_BASELINE_FACTOR and _wins(last, other):
            return (f"{baseline} is a slow path on this device: {other['precision']} runs {factor:.3g}x faster "
                    f"at {last['shape_label']}, so speedups against {baseline} overstate the recipe")
    return None


def _emulated_only(records: pd.DataFrame, cells: pd.DataFrame) -> list[dict[str, Any]]:
    """A row for each scaled recipe of a device and workload measured only by a reference backend: listed, with
    nothing to compare, rather than left out without a word."""
    key = ["device_label", "workload", "precision"]
    reference = records[records["backend"].isin(REFERENCE_BACKENDS) & records["precision"].map(is_scaled)]
    measured = set(map(tuple, cells[key].drop_duplicates().to_numpy()))
    rows = []
    for device, workload, precision in sorted(set(map(tuple, reference[key].to_numpy())) - measured):
        backends = ", ".join(REFERENCE_BACKENDS)
        rows.append({**dict.fromkeys(COLUMNS), "device": str(device), "workload": str(workload),
                     "precision": str(precision),
                     "verdict": EMULATED_ONLY, "shapes": 0, "pays_off_from": EMULATED_ONLY,
                     "reason": f"only the {backends} reference (a quantize-dequantize model, not a way to run the "
                               f"recipe) measured {precision} here: run it on a vendor or custom backend to compare"})
    return rows


def _half_iqr(row: Any) -> float:
    """Half the interquartile range of a record's samples, s (0 where it was not stored)."""
    return (_number(row.get("iqr_s")) or 0.0) / 2


def _wins(base: Any, recipe: Any) -> bool:
    """The recipe is faster than the baseline beyond the noise: its samples' upper quartile (about median + IQR/2)
    is below the baseline's lower quartile (about median - IQR/2)."""
    return float(recipe["median_s"]) + _half_iqr(recipe) < float(base["median_s"]) - _half_iqr(base)


def _half_iqrs(frame: pd.DataFrame) -> pd.Series:
    """:func:`_half_iqr` of each row of ``frame``."""
    if "iqr_s" not in frame:
        return pd.Series(0.0, index=frame.index)
    return pd.to_numeric(frame["iqr_s"], errors="coerce").astype(float).fillna(0.0) / 2


def _summary(device: str, workload: str, precision: str, paired: pd.DataFrame, base: pd.DataFrame) -> dict[str, Any]:
    """One row of the summary; ``paired`` holds the recipe's cells in reading order, ``base`` the baseline's
    cells indexed by shape. The speedups and :func:`_wins` are taken column-wise (the same arithmetic)."""
    base_median = paired["shape"].map(base["median_s"].astype(float)).to_numpy(dtype=float)
    median = paired["median_s"].astype(float).to_numpy()
    speedups = (base_median / median).tolist()
    base_half = paired["shape"].map(_half_iqrs(base)).to_numpy(dtype=float)
    wins = (median + _half_iqrs(paired).to_numpy() < base_median - base_half).tolist()
    start = len(speedups)
    while start > 0 and wins[start - 1]:
        start -= 1
    pays = start < len(speedups)
    at = paired.iloc[start] if pays else paired.iloc[-1]
    b = base.loc[at["shape"]]
    sqnr_cost = _minus(b.get("sqnr_db"), at.get("sqnr_db"))
    energy_ratio, energy_note = _energy(b, at)
    verdict, reason = _verdict(paired, base, speedups, start)
    return {"device": device, "workload": workload, "precision": precision, "verdict": verdict, "reason": reason,
            "shapes": len(speedups),
            "pays_off_from": at["shape_label"] if pays else NEVER,
            "speedup_there": speedups[start] if pays else None,
            "backend_there": at["backend"] if pays else None,
            "largest_shape": paired.iloc[-1]["shape_label"], "speedup_at_largest": speedups[-1],
            "sqnr_cost_db": sqnr_cost, "energy_ratio": energy_ratio, "energy_note": energy_note,
            "measured_at": at["shape_label"]}


def _verdict(paired: pd.DataFrame, base: pd.DataFrame, speedups: list[float], start: int) -> tuple[str, str]:
    """The row's verdict and its reason in one sentence; ``start`` is the index of the payoff shape in ``paired``
    (its length when the recipe never pays off)."""
    if start < len(speedups):
        return PAYS_OFF, (f"faster beyond the noise from {paired.iloc[start]['shape_label']} ({speedups[start]:.3g}x) "
                          "at every larger measured shape")
    last = paired.iloc[-1]
    if speedups[-1] <= 1:
        return NEVER, f"slower at the largest shape, {last['shape_label']} ({speedups[-1]:.3g}x)"
    b = base.loc[last["shape"]]
    return WITHIN_NOISE, (f"{speedups[-1]:.3g}x faster by median at {last['shape_label']}, but within the noise: "
                          f"the recipe's upper quartile {_ms(float(last['median_s']) + _half_iqr(last))} is not "
                          f"below the baseline's lower quartile {_ms(float(b['median_s']) - _half_iqr(b))}")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


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
