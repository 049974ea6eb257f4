"""Roofline: achieved TFLOP/s against arithmetic intensity, under the device's compute and bandwidth ceilings.

Arithmetic intensity is FLOPs per byte of the minimum memory traffic (each operand read once, the output written
once, at the precision's element size), so FP8 moves a GEMM to the right of its BF16 twin. The attainable rate at
intensity ``I`` is ``min(peak TFLOP/s, bandwidth TB/s * I)``: left of the ridge a kernel is memory-bound, right of
it compute-bound. Each precision has its own compute ceiling (FP8 tensor cores are twice BF16's on Hopper); a CPU's
ceilings are measured by fp8bench (a large matmul and a large copy), a GPU's come from the device table, and the
page says which. Records of different runs may carry one ceiling measured several times (a CPU's matmul rate under
other load): ceilings within :data:`CEILING_TOLERANCE` of each other are drawn as one line. A point above its
ceiling (more than 100% of peak) means the ceiling is wrong (a CPU ceiling measured under load, a wrong table row),
and the page says so rather than draw it as a fast kernel.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from fp8bench.analysis.selection import latest_per_case, speed_comparable_frame
from fp8bench.core.noise import HostLoad
from fp8bench.core.peak_table import above_ceiling, ceiling_advice, table_peak
from fp8bench.dashboard.axes import in_ms, log_axis
from fp8bench.dashboard.express import px
from fp8bench.dashboard.safe_text import md_text
from fp8bench.dashboard.widgets import (
    NOISE_COLUMN,
    chart,
    current_view,
    nothing_selected,
    table,
)


def bandwidth_tbps(points: pd.DataFrame, device_name: str) -> tuple[float | None, str]:
    """The device's memory-bandwidth ceiling (TB/s) and where it comes from."""
    stored = pd.to_numeric(points["peak_mem_tbps"], errors="coerce").dropna()
    if not stored.empty:
        return float(stored.iloc[-1]), "stored with the records"
    peak = table_peak(device_name, "mem_bw")
    if peak is not None:
        return peak.value, peak.source
    return None, "no bandwidth ceiling stored for this device"


# Compute ceilings closer than this (relative) are one rate measured twice, drawn as one line; distinct rates of
# one device differ by 2x or more (FP32 against BF16 matmul, BF16 against FP8 tensor cores).
CEILING_TOLERANCE = 0.10


def ceiling_lines(points: pd.DataFrame) -> list[tuple[float, list[str]]]:
    """``(TFLOP/s, precisions)`` per compute ceiling to draw, lowest first. The ceilings the records carry are
    sorted and cut wherever one is more than :data:`CEILING_TOLERANCE` above the lowest of its group: a group is one
    rate measured several times, drawn once at its highest value (a ceiling is an upper bound) and labelled with
    every precision held to it."""
    stored = points.dropna(subset=["peak_tflops"]).sort_values("peak_tflops")
    lines: list[tuple[float, list[str]]] = []
    low = 0.0
    for peak, precision in zip(stored["peak_tflops"].astype(float), stored["precision"].astype(str), strict=True):
        if lines and peak <= low * (1 + CEILING_TOLERANCE):
            names = lines[-1][1]
            lines[-1] = (peak, names if precision in names else [*names, precision])
        else:
            low = peak
            lines.append((peak, [precision]))
    return lines


def roofline_figure(points: pd.DataFrame, bw: float | None) -> go.Figure:
    shown = points.assign(median_ms=in_ms(points["median_s"]))
    fig = px.scatter(shown, x="intensity", y="tflops", color="precision", symbol="backend",
                     hover_data={"workload": True, "shape_label": True, "median_ms": ":.3g", "pct_of_peak": ":.3g",
                                 "run_id": True},
                     labels={"intensity": "arithmetic intensity (FLOP/byte)", "tflops": "achieved TFLOP/s",
                             "median_ms": "median (ms)"})
    lo = float(points["intensity"].min()) / 4
    hi = float(points["intensity"].max()) * 4
    xs = np.geomspace(lo, hi, 200)
    rates = list(points["tflops"])
    for peak, names in ceiling_lines(points):
        ys = np.minimum(peak, bw * xs) if bw else np.full_like(xs, peak)
        rates += [float(ys.min()), peak]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"dash": "dash", "width": 1.5},
                                 name=f"ceiling {peak:.3g} TFLOP/s ({', '.join(sorted(names))})"))
    log_axis(fig, "x", [lo, hi])
    log_axis(fig, "y", rates)
    # The legend (precision x backend, and each ceiling with its precisions) goes under the plot, not beside it.
    fig.update_layout(height=680, margin={"l": 10, "r": 10, "t": 30, "b": 10},
                      legend={"orientation": "h", "yanchor": "top", "y": -0.15})
    return fig


def main() -> None:
    view = current_view()
    st.title("Roofline")
    points = speed_comparable_frame(view.records).dropna(subset=["intensity", "tflops"])
    points = points[(points["intensity"] > 0) & (points["tflops"] > 0)]  # a log axis has no place for zero
    if points.empty:
        nothing_selected("measured records with FLOP and byte counts")
        return
    devices = sorted(points["device_label"].unique())
    device = st.selectbox("Device", devices)
    points = latest_per_case(points[points["device_label"] == device])
    points, loaded = without_loaded_ceilings(points)
    bw, bw_source = bandwidth_tbps(points, device)
    chart(roofline_figure(points, bw), key="roofline_chart")
    bw_text = f"{bw:.3g} TB/s ({bw_source})" if bw else bw_source
    sources = "; ".join(sorted(points["peak_source"].dropna().unique())) or "none stored"
    where = ("fp8bench's own measurement of this CPU (a large matmul and a large copy)" if device_is_cpu(points) else
             "the device table, fp8bench/core/data/device_peaks.json, each value with its source")
    st.caption(f"Ceilings come from {where}. Bandwidth ceiling: {md_text(bw_text)}. Compute ceilings: "
               f"{md_text(sources)}. Latest record per case.{md_text(loaded)}")
    over = points[points["pct_of_peak"].map(above_ceiling)]
    if not over.empty:
        st.warning(f"{len(over)} point(s) above their ceiling (% of peak over 100, marked in the table): the "
                   f"ceiling is wrong, not the kernel. {md_text(ceiling_advice(str(over['device'].iloc[0])))}.")
    points = points.assign(above_ceiling=points["pct_of_peak"].map(above_ceiling))
    table(points[["workload", "shape_label", "precision", "backend", "flops", "bytes", "intensity", "tflops",
                  "gbps", "peak_tflops", "pct_of_peak", "above_ceiling", "noise", "noisy", "run_id"]], "roofline",
          noise=NOISE_COLUMN)


def without_loaded_ceilings(points: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``points`` with no ceiling (nor % of peak) where their ceiling was measured under load, and a sentence
    saying how many: a CPU's matmul and copy rates drop while other processes hold its cores, so a kernel would
    read above its ceiling. Runs since withhold such a ceiling themselves; older records still carry one."""
    loads = points["peak_source"].map(HostLoad.parse)
    loaded = loads.map(lambda load: load is not None and load.overloaded).astype(bool)
    if not loaded.any():
        return points, ""
    named = sorted({load.describe() for load in loads[loaded]})
    points = points.copy()
    points.loc[loaded, ["peak_tflops", "pct_of_peak", "peak_mem_tbps", "peak_source"]] = np.nan
    return points, (f" {int(loaded.sum())} record(s) carry a ceiling measured under load ({'; '.join(named)}): "
                    "not drawn, and no % of peak against it.")


def device_is_cpu(points: pd.DataFrame) -> bool:
    return bool(points["device"].astype(str).str.startswith("cpu").all())


main()
