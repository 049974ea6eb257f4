"""Numerics: how much accuracy each recipe gives up, and whether FP8 training follows BF16's loss curve.

SQNR (signal-to-quantization-noise ratio, dB) is ``10 log10(|ref|^2 / |out - ref|^2)`` against an FP64 reference on
the same inputs: every 6 dB is about one more correct bit. BF16 keeps 8 significant bits (about 50 dB), E4M3 FP8
keeps 4 (about 25-30 dB with a good scale). Finer scaling granularity (row-wise, 32-element MX blocks) adapts the
scale to outliers and usually buys back a few dB. Overflow counts values saturated at the format's maximum,
underflow values flushed to zero.

For training, a single GEMM's error says little; the test that matters is whether an FP8 run's loss curve tracks
the BF16 curve over the same steps, shown with its relative gap and the verdict ``fp8bench converge`` stored
(ok, gap, diverged).
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from fp8bench.analysis.payoff import in_reading_order
from fp8bench.analysis.selection import latest_per_case
from fp8bench.core.loss_curves import smooth  # the check's smoothing, so the chart and the verdict agree
from fp8bench.dashboard.axes import log_axis
from fp8bench.dashboard.express import px
from fp8bench.dashboard.widgets import (
    chart,
    current_view,
    nothing_selected,
    table,
    wrap_label,
)

METRICS = {"SQNR (dB, higher is better)": "sqnr_db", "relative error (lower is better)": "rel_err"}
BASELINE_CURVE = "bf16"
# Height per case row of the error chart, px, and per extra line of a wrapped shape label.
CASE_HEIGHT, LINE_HEIGHT = 44, 14


def relative_gap(curve: list[float], base: list[float], window: int) -> list[float]:
    """``(L - L_bf16) / L_bf16`` per step of the smoothed curves: the convergence check's own definition."""
    n = min(len(curve), len(base))
    c, b = smooth(curve[:n], window), smooth(base[:n], window)
    return [(x - y) / y if y else float("nan") for x, y in zip(c, b, strict=True)]


def loss_figure(group: pd.DataFrame) -> go.Figure:
    """Loss per step for each precision, and each FP8 curve's relative gap to the BF16 curve."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.6, 0.4], vertical_spacing=0.08,
                        subplot_titles=("training loss per step", f"relative gap to {BASELINE_CURVE} "
                                        "(smoothed; above 0 trains worse)"))
    base = group[group["precision"] == BASELINE_CURVE]
    base_row = base.iloc[-1] if not base.empty else None
    colours = px.colors.qualitative.Bold
    for i, row in enumerate(group.itertuples()):
        colour = colours[i % len(colours)]
        steps = list(range(1, len(row.losses) + 1))
        fig.add_trace(go.Scatter(x=steps, y=row.losses, mode="lines", name=f"{row.precision} ({row.backend})",
                                 line={"color": colour}), row=1, col=1)
        if base_row is not None and row.precision != BASELINE_CURVE:
            window = int(row.conv_window) if pd.notna(row.conv_window) else 1
            gap = relative_gap(row.losses, base_row["losses"], window)
            fig.add_trace(go.Scatter(x=steps[:len(gap)], y=gap, mode="lines", name=f"gap {row.precision}",
                                     line={"color": colour}, showlegend=False), row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_yaxes(tickformat=".2%", row=2, col=1)
    fig.update_layout(height=560, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def loss_curves(records: pd.DataFrame) -> None:
    st.subheader("Training loss: FP8 against BF16")
    curves = latest_per_case(records[records["losses"].notna()]).copy()
    if curves.empty:
        st.caption("No training-loss curves in this selection. `fp8bench converge` trains the same model in BF16 "
                   "and each FP8 recipe and stores every curve (workload `transformer_step`).")
        return
    curves["group"] = curves["device_label"] + " · " + curves["workload"] + " " + curves["shape_label"]
    group_name = st.selectbox("Training case", sorted(curves["group"].unique()))
    group = curves[curves["group"] == group_name].sort_values("precision")
    chart(loss_figure(group), key="numerics_losses")
    if not (group["precision"] == BASELINE_CURVE).any():
        st.caption(f"No {BASELINE_CURVE} curve for this case, so no gap can be shown.")
    table(group[["precision", "backend", "conv_verdict", "conv_final_gap", "conv_max_gap", "conv_max_gap_step",
                 "status", "reason", "run_id"]], "convergence",
          conv_final_gap=st.column_config.NumberColumn("final gap", format="percent"),
          conv_max_gap=st.column_config.NumberColumn("largest gap", format="percent"))


def error_figure(measured: pd.DataFrame, metric: str, label: str) -> go.Figure:
    """One row per case (in reading order: workload, then FLOPs), a marker per precision and backend. The cases
    run down the page, so a long shape (a transformer's whole config) is a wrapped row label that costs the chart
    height, not width."""
    measured = in_reading_order(measured)
    several = measured["device_label"].nunique() > 1
    measured = measured.assign(case=(measured["device_label"] + " · " if several else "") + measured["workload"]
                               + "<br>" + measured["shape_label"].map(wrap_label))
    cases = list(dict.fromkeys(measured["case"]))
    fig = px.scatter(measured, x=metric, y="case", color="precision", symbol="backend",
                     category_orders={"case": cases},
                     hover_data=["shape_label", "fp8_format", "overflow_frac", "underflow_frac", "run_id"],
                     labels={"case": "", metric: label})
    fig.update_traces(marker={"size": 11, "line": {"width": 1, "color": "white"}})
    fig.update_yaxes(showgrid=True)  # px lists category_orders from the top down
    if metric == "rel_err":
        log_axis(fig, "x", measured[metric])
    lines = sum(case.count("<br>") for case in cases)
    fig.update_layout(height=max(320, 120 + CASE_HEIGHT * len(cases) + LINE_HEIGHT * lines),
                      margin={"l": 10, "r": 10, "t": 30, "b": 10})
    return fig


def main() -> None:
    view = current_view()
    st.title("Numerics")
    records = view.records[view.records["status"].isin(["ok", "invalid"])]
    measured = latest_per_case(records[records["sqnr_db"].notna() | records["rel_err"].notna()])
    if measured.empty:
        nothing_selected("records with numerics")
    else:
        label = st.radio("Metric", list(METRICS), horizontal=True)
        metric = METRICS[label]
        fig = error_figure(measured, metric, label)
        chart(fig, key="numerics_chart")
        table(measured[["device_label", "workload", "shape_label", "precision", "fp8_format", "backend", "sqnr_db",
                        "rel_err", "max_abs_err", "overflow_frac", "underflow_frac", "run_id"]], "numerics")
    loss_curves(records)


main()
