"""Overview: the speedup of every precision against a baseline, per device and workload shape, best backend per cell.

A cell is ``baseline time / precision time`` for the latest measurement of that case, taking the fastest backend.
End-to-end time includes FP8's quantization (amax, scale, cast); the pre-quantized time is the GEMM alone, the
number vendors quote. Colours are on a log scale centred on 1x, so 2x faster and 2x slower are equally loud.
Interpreted, invalid and unmeasured records never enter a speed comparison.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from fp8bench.dashboard.safe_text import md_text
from fp8bench.dashboard.speedup import speedup_frame
from fp8bench.dashboard.widgets import (
    NOISE_COLUMN,
    chart,
    current_view,
    latest_per_case,
    nothing_selected,
    speed_comparable,
    table,
)

MODES = {"End-to-end (with quantization)": "speedup_e2e", "Pre-quantized GEMM only": "speedup_prequant"}


def _short(text: str, limit: int = 44) -> str:
    """Long shape texts (a transformer's whole config) would squeeze the heatmap: cut them, the table has all."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def best_cells(speeds: pd.DataFrame, column: str) -> pd.DataFrame:
    """One row per (row label, precision): the backend with the highest speedup in ``column``."""
    ok = speeds[speeds[column].notna()].copy()
    ok["row"] = ok["device_label"] + "<br>" + ok["workload"] + " " + ok["shape_label"].map(_short)
    best = ok.sort_values(column, ascending=False).drop_duplicates(["row", "precision"])
    return best.sort_values(["row", "precision"])


def heatmap(best: pd.DataFrame, column: str, baseline: str) -> go.Figure:
    z = best.pivot(index="row", columns="precision", values=column)
    backend = best.pivot(index="row", columns="precision", values="backend").reindex_like(z)
    text = [[("" if pd.isna(v) else f"{v:.2f}x<br>{b}") for v, b in zip(zr, br, strict=True)]
            for zr, br in zip(z.to_numpy(), backend.to_numpy(), strict=True)]
    log2 = np.log2(z.to_numpy(dtype=float))
    span = float(np.nanmax(np.abs(log2))) if np.isfinite(log2).any() else 1.0
    fig = go.Figure(go.Heatmap(
        z=log2, x=list(z.columns), y=list(z.index), text=text, texttemplate="%{text}",
        customdata=z.to_numpy(dtype=float), colorscale="RdBu", zmid=0, zmin=-max(span, 0.1), zmax=max(span, 0.1),
        hovertemplate="%{y}<br>%{x}: %{customdata:.3f}x vs " + baseline + "<extra></extra>", xgap=2, ygap=2,
        colorbar={"title": f"log2 speedup<br>vs {baseline}"}))
    fig.update_layout(height=max(260, 80 + 70 * len(z.index)), margin={"l": 10, "r": 10, "t": 30, "b": 10},
                      xaxis_title="precision", yaxis_title="")
    return fig


def main() -> None:
    view = current_view()
    st.title("Overview: does FP8 pay off?")
    comparable = speed_comparable(view.records)
    if comparable.empty:
        nothing_selected("measured, valid, non-interpreted records")
        return
    precisions = sorted(comparable["precision"].unique())
    col1, col2 = st.columns([1, 2])
    baseline = col1.selectbox("Baseline precision", precisions,
                              index=precisions.index("bf16") if "bf16" in precisions else 0)
    mode = col2.radio("Time compared", list(MODES), horizontal=True)
    column = MODES[mode]
    speeds = speedup_frame(latest_per_case(comparable), baseline)
    best = best_cells(speeds, column)
    if best.empty:
        st.info(f"No case has a {md_text(baseline)} baseline to compare against; choose another baseline precision.")
        return
    fp8 = best[best["precision"].str.contains("fp8")]
    if not fp8.empty:
        top = fp8.loc[fp8[column].idxmax()]
        worst = fp8.loc[fp8[column].idxmin()]
        m1, m2, m3 = st.columns(3)
        for col, label, cell in ((m1, "Best FP8 cell", top), (m2, "Worst FP8 cell", worst)):
            where = f"{cell['precision']} {cell['backend']} · {cell['row'].replace('<br>', ' · ')}"
            col.metric(label, f"{cell[column]:.2f}x", md_text(where), delta_color="off", delta_arrow="off")
        m3.metric("FP8 cells faster than " + md_text(baseline), f"{int((fp8[column] > 1).sum())} of {len(fp8)}")
    chart(heatmap(best, column, baseline), key="overview_heatmap")
    excluded = len(latest_per_case(view.records)) - len(latest_per_case(comparable))
    st.caption(f"Latest record per case; fastest backend per cell. {excluded} case(s) not compared on speed "
               "(skipped, failed, invalid or interpreted): see the table on the Environment page or the run table.")
    st.subheader("Speedups per record")
    table(speeds[["device_label", "workload", "shape_label", "precision", "backend", "median_s",
                  "prequant_median_s", "speedup_e2e", "speedup_prequant", "noise", "noisy", "tflops", "pct_of_peak",
                  "run_id"]],
          "speedups", noise=NOISE_COLUMN, median_s=st.column_config.NumberColumn("median_s (s)", format="%.3e"),
          prequant_median_s=st.column_config.NumberColumn("prequant_median_s (s)", format="%.3e"),
          speedup_e2e=st.column_config.NumberColumn(format="%.3fx"),
          speedup_prequant=st.column_config.NumberColumn(format="%.3fx"))


main()
