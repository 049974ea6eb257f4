"""Payoff: where FP8 pays off, per device and workload (``fp8bench payoff`` shows the same table).

For each scaled recipe, over the shapes measured with both it and the baseline, ordered by FLOPs: the smallest shape
from which the recipe is faster end to end (quantization included) at every larger shape, the speedup there and at
the largest shape, what it costs in SQNR (dB) and its energy per iteration against the baseline. The chart shows
each recipe's speedup against shape, so the crossover (or its absence) is visible; above the dashed line the recipe
wins. Each point is the fastest non-reference backend; the emulated reference is left out.
"""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from fp8bench.dashboard.safe_text import md_text
from fp8bench.dashboard.widgets import (
    chart,
    current_view,
    latest_per_case,
    nothing_selected,
    speed_comparable,
    table,
)
from fp8bench.payoff import BASELINE, NEVER, REFERENCE_BACKENDS, UNSCALED, payoff_table

# The answer first; where it was read and how many shapes it rests on last.
SHOWN = ["device", "workload", "precision", "pays_off_from", "speedup_there", "speedup_at_largest", "sqnr_cost_db",
         "energy_ratio", "energy_note", "largest_shape", "backend_there", "measured_at", "shapes"]


def speedup_curves(records: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Per device, workload, recipe and shape: baseline time / recipe time (fastest backend of each)."""
    usable = records[~records["backend"].isin(REFERENCE_BACKENDS)]
    fastest = usable.sort_values("median_s").drop_duplicates(["device_label", "workload", "shape", "precision"])
    base = fastest[fastest["precision"] == baseline][["device_label", "workload", "shape", "median_s"]]
    recipes = fastest[~fastest["precision"].isin(UNSCALED)]
    merged = recipes.merge(base, on=["device_label", "workload", "shape"], suffixes=("", "_base"))
    merged["speedup"] = merged["median_s_base"] / merged["median_s"]
    return merged.sort_values(["device_label", "workload", "flops", "shape"])


def curves_figure(curves: pd.DataFrame, baseline: str) -> go.Figure:
    fig = px.line(curves, x="shape_label", y="speedup", color="precision", line_dash="device_label", markers=True,
                  facet_col="workload" if curves["workload"].nunique() > 1 else None, log_y=True,
                  hover_data=["backend", "median_s", "median_s_base"],
                  labels={"shape_label": "shape (by FLOPs)", "speedup": f"speedup vs {baseline} (end to end)"})
    fig.add_hline(y=1.0, line_dash="dash", annotation_text=f"{baseline}", annotation_position="bottom right")
    fig.update_xaxes(type="category")
    fig.update_layout(height=460, margin={"l": 10, "r": 10, "t": 40, "b": 10})
    return fig


def main() -> None:
    view = current_view()
    st.title("Where FP8 pays off")
    records = latest_per_case(speed_comparable(view.records))
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
    paying = summary[summary["pays_off_from"] != NEVER]
    m1, m2 = st.columns(2)
    m1.metric("Recipes that pay off", f"{len(paying)} of {len(summary)}")
    if not paying.empty:
        best = paying.loc[paying["speedup_at_largest"].idxmax()]
        m2.metric("Best speedup at the largest shape", f"{best['speedup_at_largest']:.2f}x",
                  md_text(f"{best['precision']} · {best['device']} · {best['workload']}"), delta_color="off",
                  delta_arrow="off")
    else:
        m2.metric("Best speedup at the largest shape", f"{summary['speedup_at_largest'].max():.2f}x",
                  "no recipe beats the baseline here", delta_color="off", delta_arrow="off")
    table(summary[SHOWN], "payoff", speedup_there=st.column_config.NumberColumn(format="%.2fx"),
          speedup_at_largest=st.column_config.NumberColumn(format="%.2fx"),
          sqnr_cost_db=st.column_config.NumberColumn("SQNR cost (dB)", format="%.1f"),
          energy_ratio=st.column_config.NumberColumn("energy vs baseline", format="%.2fx"))
    st.caption("Pays off from: the smallest shape from which the recipe wins at every larger measured shape. "
               "SQNR cost and energy are read at that shape, or at the largest shape when it never pays off.")
    chart(curves_figure(speedup_curves(records, baseline), baseline), key="payoff_chart")


main()
