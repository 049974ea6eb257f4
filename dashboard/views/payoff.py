"""Payoff: where FP8 pays off, per device and workload (``fp8bench payoff`` shows the same table).

For each scaled recipe, over the shapes measured with both it and the baseline, ordered by FLOPs: the smallest shape
from which the recipe is faster end to end (quantization included) at every larger shape, the speedup there and at
the largest shape, what it costs in SQNR (dB) and its energy per iteration against the baseline. The chart shows
each recipe's speedup against shape, one panel per workload with its own shapes in order of FLOPs, so the crossover
(or its absence) is visible; above the dashed line the recipe wins. Each point is a cell as Overview draws it
(:func:`fp8bench.analysis.payoff.cell_speedups`): the fastest non-reference backend; the emulated reference is left out.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from fp8bench.analysis.payoff import BASELINE, cell_speedups, paying_off, payoff_table, shape_family
from fp8bench.analysis.selection import is_scaled, latest_per_case, speed_comparable_frame
from fp8bench.dashboard.axes import in_ms, log_axis
from fp8bench.dashboard.express import px
from fp8bench.dashboard.safe_text import md_text
from fp8bench.dashboard.widgets import (
    chart,
    current_view,
    nothing_selected,
    ratio_text,
    table,
    wrap_label,
)

# The answer first; where it was read and how many shapes it rests on last.
SHOWN = ["device", "workload", "precision", "verdict", "pays_off_from", "speedup_there", "speedup_at_largest",
         "sqnr_cost_db", "energy_ratio", "reason", "baseline_note", "energy_note", "largest_shape", "backend_there",
         "measured_at", "shapes"]


# Height of one workload's panel and of the gap below it, px: the gap holds the panel's wrapped shape labels (up to
# four lines), its axis title and the next panel's title.
PANEL_HEIGHT, PANEL_GAP = 260, 150
DEVICE_DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


def speedup_curves(records: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per device, workload, recipe and shape: the baseline cell's time / the recipe cell's, in reading order."""
    cells = cell_speedups(records, baseline)
    return cells[cells["precision"].map(is_scaled)]


def curves_figure(curves: pd.DataFrame, baseline: str) -> go.Figure:
    """One panel per workload, each with its own shape axis (its shapes only, in order of FLOPs) and a log speedup
    axis; colour is the recipe, dash the device."""
    workloads = list(dict.fromkeys(curves["workload"]))
    height = 100 + (PANEL_HEIGHT + PANEL_GAP) * len(workloads)
    fig = make_subplots(rows=len(workloads), cols=1, subplot_titles=workloads,
                        vertical_spacing=PANEL_GAP / height)  # plotly's spacing is a fraction of the whole height
    colours = dict(zip(sorted(curves["precision"].unique()), px.colors.qualitative.Bold * 4, strict=False))
    dashes = dict(zip(sorted(curves["device_label"].unique()), DEVICE_DASHES * 4, strict=False))
    shown: set[str] = set()
    for row, workload in enumerate(workloads, start=1):
        panel = curves[curves["workload"] == workload].assign(
            tick=lambda f: f["shape_label"].map(wrap_label), family=lambda f: f["shape"].map(shape_family))
        # One line per recipe, device and shape family: a line joins sizes, never two routings or two ops.
        for (precision, device, family), line in panel.groupby(["precision", "device_label", "family"], sort=False):
            name = " · ".join(filter(None, [precision, device if len(dashes) > 1 else "", family]))
            fig.add_trace(go.Scatter(
                x=line["tick"], y=line["speedup"], mode="lines+markers", name=name, legendgroup=name,
                showlegend=name not in shown, line={"color": colours[precision], "dash": dashes[device]},
                customdata=line[["backend"]].assign(ms=in_ms(line["median_s"]),
                                                    base_ms=in_ms(line["median_s_base"])).to_numpy(),
                hovertemplate=(f"{name}<br>%{{x}}<br>%{{y:.3g}}x vs {baseline} (%{{customdata[0]}})<br>"
                               f"%{{customdata[1]:.3g}} ms against %{{customdata[2]:.3g}} ms<extra></extra>")),
                row=row, col=1)
            shown.add(name)
        fig.update_xaxes(type="category", categoryorder="array", categoryarray=list(dict.fromkeys(panel["tick"])),
                         title_text="shape (in order of FLOPs)", row=row, col=1)
        log_axis(fig, "y", [1.0, *panel["speedup"]], suffix="x", title_text=f"speedup vs {baseline}", row=row, col=1)
        fig.add_hline(y=1.0, line_dash="dash", line_color="grey", row=row, col=1)
    fig.update_layout(height=height, margin={"l": 10, "r": 10, "t": 60, "b": 10},
                      title=f"Speedup against {baseline}, end to end (above the dashed line the recipe wins)")
    return fig


def main() -> None:
    view = current_view()
    st.title("Where FP8 pays off")
    records = latest_per_case(speed_comparable_frame(view.records))
    if records.empty:
        nothing_selected("measured, valid, non-interpreted records")
        return
    precisions = sorted(records["precision"].unique())
    baseline = st.selectbox("Baseline", precisions, index=precisions.index(BASELINE) if BASELINE in precisions else 0)
    summary = payoff_table(records, baseline)
    if summary.empty:
        st.info(f"No recipe has both its own and a {md_text(baseline)} measurement of the same shape in this "
                f"selection: run the same shapes in {md_text(baseline)} and an FP8 recipe.")
        return
    paying = paying_off(summary)
    m1, m2 = st.columns(2)
    m1.metric("Recipes that pay off", f"{len(paying)} of {len(summary)}")
    if not paying.empty:
        best = paying.loc[paying["speedup_at_largest"].idxmax()]
        m2.metric("Best speedup at the largest shape", ratio_text(best["speedup_at_largest"]),
                  md_text(f"{best['precision']} · {best['device']} · {best['workload']}"), delta_color="off",
                  delta_arrow="off")
    else:
        m2.metric("Best speedup at the largest shape", ratio_text(summary["speedup_at_largest"].max()),
                  "no recipe beats the baseline here", delta_color="off", delta_arrow="off")
    table(summary[SHOWN], "payoff", speedup_there=st.column_config.NumberColumn(format="%.3gx"),
          speedup_at_largest=st.column_config.NumberColumn(format="%.3gx"),
          sqnr_cost_db=st.column_config.NumberColumn("SQNR cost (dB)", format="%.1f"),
          energy_ratio=st.column_config.NumberColumn("energy vs baseline", format="%.2fx"))
    st.caption("Pays off from: the smallest shape from which the recipe wins at every larger measured shape. "
               "SQNR cost and energy are read at that shape, or at the largest shape when it never pays off.")
    curves = speedup_curves(records, baseline)
    if not curves.empty:
        chart(curves_figure(curves, baseline), key="payoff_chart")


main()
