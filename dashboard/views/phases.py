"""Phases: where the time of each precision and backend goes.

FP8 pays for its faster GEMM with a quantize phase (find the absolute maximum, compute a scale, cast) and often an
epilogue (rescale the output). Each phase is timed on its own, so the stacked bars show how much of the gain the
scaling eats; the diamond marks the end-to-end median, timed as one call (it can differ from the stack's sum by
launch gaps and cache effects between phases). A case run with ``fp8bench run --profile`` lists its profile traces
(one per precision and backend) below the table. On a GPU the table also gives the host's wall time per call and the
launch overhead (that time less the device time: launches and host work the GPU did not overlap), which says how
much of a small case is Python and the driver rather than kernels. Cases are listed in reading order (workload, then
FLOPs), and the page opens on the first that measured an FP8 or 4-bit recipe: the GEMMs before the collectives.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from fp8bench.analysis.payoff import in_reading_order
from fp8bench.analysis.selection import is_scaled, latest_per_case, speed_comparable_frame
from fp8bench.dashboard.data import PHASE_PREFIX, phase_columns
from fp8bench.dashboard.express import px
from fp8bench.dashboard.profiles import show_traces
from fp8bench.dashboard.widgets import (
    chart,
    current_view,
    nothing_selected,
    table,
)


def phase_figure(case: pd.DataFrame, phase_cols: list[str]) -> go.Figure:
    labels = case["precision"] + " / " + case["backend"]
    fig = go.Figure()
    colours = px.colors.qualitative.Bold
    for i, col in enumerate(phase_cols):
        fig.add_trace(go.Bar(x=labels, y=case[col] * 1e3, name=col.removeprefix(PHASE_PREFIX),
                             marker_color=colours[i % len(colours)]))
    fig.add_trace(go.Scatter(x=labels, y=case["median_s"] * 1e3, mode="markers", name="end-to-end median",
                             marker={"symbol": "diamond", "size": 12, "color": "black"}))
    fig.update_layout(barmode="stack", height=460, yaxis_title="median time per call (ms)",
                      margin={"l": 10, "r": 10, "t": 30, "b": 10})
    return fig


def main() -> None:
    view = current_view()
    st.title("Phases")
    records = speed_comparable_frame(view.records)
    phase_cols = [c for c in phase_columns(records) if records[c].notna().any()] if not records.empty else []
    if not phase_cols:
        nothing_selected("measured records with phase timings")
        return
    records = in_reading_order(latest_per_case(records))
    records = records.assign(case=records["device_label"] + " · " + records["workload"] + " " + records["shape_label"])
    cases = list(dict.fromkeys(records["case"]))
    with_recipe = set(records.loc[records["precision"].map(is_scaled), "case"])
    first = next((i for i, c in enumerate(cases) if c in with_recipe), 0)
    case_name = st.selectbox("Case", cases, index=first)
    case = records[records["case"] == case_name].sort_values(["precision", "backend"])
    phase_cols = [c for c in phase_cols if case[c].notna().any()]  # this case's phases: a GEMM has no optimizer
    chart(phase_figure(case, phase_cols), key="phases_chart")
    host = [c for c in ("host_median_s", "launch_overhead_s") if c in case and case[c].notna().any()]
    shown = case[["precision", "backend", "median_s", *host, "prequant_median_s", *phase_cols, "run_id"]].copy()
    quantize = PHASE_PREFIX + "quantize"
    if quantize in shown:
        shown["quantize_share"] = shown[quantize] / case[phase_cols].sum(axis=1, min_count=1)
    # Phase medians are seconds: named so, the table shows them in ms as every time (and the CSV says the unit).
    shown = shown.rename(columns={c: f"{c}_s" for c in phase_cols})
    table(shown, "phases", quantize_share=st.column_config.NumberColumn(format="percent"))
    show_traces(case, case["precision"] + " / " + case["backend"])


main()
