"""Overview: the speedup of every precision against a baseline, per device and workload shape, best backend per cell.

A cell is ``baseline time / precision time`` at one device, workload and shape, each side taking its fastest
vendor or custom backend; the emulated reference (a quantize-dequantize model of a recipe, never a way to run one)
is left out. Payoff reads the same cells (:func:`fp8bench.analysis.payoff.cell_speedups`), so an FP8 or 4-bit cell here
is a point on Payoff's curves. End-to-end time includes FP8's quantization (amax, scale, cast); the pre-quantized
time is the GEMM alone, the number vendors quote. Colours are on a log scale centred on 1x, so 2x faster and 2x
slower are equally loud. Rows are in reading order: by device, workload, then FLOPs. Interpreted, invalid and
unmeasured records never enter a speed comparison. The table below the heatmap has every record, each against
the baseline of its own backend, as in the run table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from fp8bench.analysis.payoff import cell_speedups, paying_off, payoff_table
from fp8bench.analysis.selection import REFERENCE_BACKENDS, is_scaled, latest_per_case, speed_comparable_frame
from fp8bench.core.repro import frame_commands
from fp8bench.dashboard.data import cached
from fp8bench.dashboard.safe_text import md_text
from fp8bench.dashboard.speedup import speedup_frame
from fp8bench.dashboard.widgets import (
    NOISE_COLUMN,
    View,
    chart,
    current_view,
    nothing_selected,
    ratio_text,
    table,
    wrap_label,
)
from fp8bench.results.store.queries import RecordFilter

MODES = {"End-to-end (with quantization)": "speedup", "Pre-quantized GEMM only": "speedup_prequant"}
ROW_HEIGHT = 70  # px per heatmap row: room for a wrapped shape label of four lines


def row_labels(cells: pd.DataFrame) -> pd.Series:
    """A heatmap row per device, workload and shape (the shape wrapped, whole)."""
    return cells["device_label"] + "<br>" + cells["workload"] + " " + cells["shape_label"].map(wrap_label)


def heatmap(cells: pd.DataFrame, column: str, baseline: str) -> go.Figure:
    cells = cells.assign(row=row_labels(cells))
    rows = list(dict.fromkeys(cells["row"]))  # the cells come in reading order
    z = cells.pivot(index="row", columns="precision", values=column).reindex(rows)
    backend = cells.pivot(index="row", columns="precision", values="backend").reindex_like(z)
    text = [[("" if pd.isna(v) else f"{ratio_text(v)}<br>{b}") for v, b in zip(zr, br, strict=True)]
            for zr, br in zip(z.to_numpy(), backend.to_numpy(), strict=True)]
    log2 = np.log2(z.to_numpy(dtype=float))
    span = float(np.nanmax(np.abs(log2))) if np.isfinite(log2).any() else 1.0
    # The bar is labelled with the speedups its log2 colours stand for (-2 would read as a speedup of -2).
    top = int(np.ceil(max(span, 0.1)))
    stride = max(1, int(np.ceil(top / 4)))  # at most nine labels on the bar
    steps = list(range(-(top // stride) * stride, top + 1, stride))
    fig = go.Figure(go.Heatmap(
        z=log2, x=list(z.columns), y=list(z.index), text=text, texttemplate="%{text}",
        customdata=z.to_numpy(dtype=float), colorscale="RdBu", zmid=0, zmin=-max(span, 0.1), zmax=max(span, 0.1),
        hovertemplate="%{y}<br>%{x}: %{customdata:.3f}x vs " + baseline + "<extra></extra>", xgap=2, ygap=2,
        colorbar={"title": f"speedup<br>vs {baseline}", "tickvals": steps,
                  "ticktext": [ratio_text(2.0**s) for s in steps]}))
    fig.update_yaxes(autorange="reversed")  # the first row in reading order on top
    fig.update_layout(height=max(260, 80 + ROW_HEIGHT * len(rows)), margin={"l": 10, "r": 10, "t": 30, "b": 10},
                      xaxis_title="precision", yaxis_title="")
    return fig


def scaled_metrics(cells: pd.DataFrame, column: str, baseline: str, summary: pd.DataFrame | None) -> None:
    """The best and worst FP8/4-bit cell, and how many recipes pay off by Payoff's rule (one count, one rule);
    ``summary`` is the payoff table (:func:`derived`), ``None`` when no cell is FP8/4-bit."""
    scaled = cells[cells["precision"].map(is_scaled)]
    if scaled.empty or summary is None:
        return
    m1, m2, m3 = st.columns(3)
    for col, label, cell in ((m1, "Best FP8/4-bit cell", scaled.loc[scaled[column].idxmax()]),
                             (m2, "Worst FP8/4-bit cell", scaled.loc[scaled[column].idxmin()])):
        where = f"{cell['precision']} {cell['backend']} · {cell['device_label']} · {cell['workload']} " \
                f"{cell['shape_label']}"
        col.metric(label, ratio_text(cell[column]), md_text(where), delta_color="off", delta_arrow="off")
    m3.metric("FP8/4-bit recipes that pay off vs " + md_text(baseline), f"{len(paying_off(summary))} of {len(summary)}",
              "beyond the noise, as on Payoff", delta_color="off", delta_arrow="off")


TABLE_COLUMNS = ["device_label", "workload", "shape_label", "precision", "backend", "median_s", "prequant_median_s",
                 "speedup_e2e", "speedup_prequant", "noise", "noisy", "tflops", "pct_of_peak", "run_id", "repro"]


def derived(view: View, baseline: str, column: str) -> dict[str, Any]:
    """What the page draws for one baseline and time compared: the cells, the payoff table, the number of cases
    left out, the per-record table and its row labels. Computed once per store state, filters and choice; a rerun
    (a widget, a reload) reads it from the cache."""
    return _derived(view.snapshot.target, view.snapshot.fingerprint, view.query, baseline, column, view)


@cached
def _derived(target: str, fingerprint: tuple[int, int, int], query: RecordFilter, baseline: str, column: str,
             _view: View) -> dict[str, Any]:
    # The key is the store's state and the filters, which decide the view's records; the view itself is not hashed.
    latest = latest_per_case(speed_comparable_frame(_view.records))
    cells = cell_speedups(latest, baseline)
    cells = cells[cells[column].notna()]
    scaled = not cells.empty and cells["precision"].map(is_scaled).any()
    speeds = speedup_frame(latest, baseline)
    runs = _view.snapshot.runs
    headers = dict(zip(runs["run_id"], runs["header"], strict=True)) if "header" in runs else {}
    speeds = speeds.assign(repro=frame_commands(speeds, headers))[TABLE_COLUMNS]
    labels = [f"{r.workload} {r.shape_label} {r.precision} {r.backend} · {r.device_label} · {r.run_id}"
              for r in speeds.itertuples()]
    return {"cells": cells, "summary": payoff_table(latest, baseline) if scaled else None, "speeds": speeds,
            "excluded": len(latest_per_case(_view.records)) - len(latest), "labels": labels}


def main() -> None:
    view = current_view()
    st.title("Overview: does FP8 pay off?")
    comparable = speed_comparable_frame(view.records)
    if comparable.empty:
        nothing_selected("measured, valid, non-interpreted records")
        return
    precisions = sorted(comparable["precision"].unique())
    col1, col2 = st.columns([1, 2])
    baseline = col1.selectbox("Baseline precision", precisions,
                              index=precisions.index("bf16") if "bf16" in precisions else 0)
    mode = col2.radio("Time compared", list(MODES), horizontal=True)
    column = MODES[mode]
    page = derived(view, baseline, column)
    cells = page["cells"]
    references = ", ".join(REFERENCE_BACKENDS)
    if cells.empty:
        st.info(f"No case has a {md_text(baseline)} baseline measured by a vendor or custom backend to compare "
                f"against: choose another baseline precision, or run one with `--backend torch` (the {references} "
                "reference is not a way to run a recipe, so it makes no cell; its records are in the table below).")
    else:
        scaled_metrics(cells, column, baseline, page["summary"])
        chart(heatmap(cells, column, baseline), key="overview_heatmap")
        st.caption(f"Latest record per case; each cell is its precision's fastest backend, the {references} "
                   f"reference left out (as on Payoff). {page['excluded']} case(s) not compared on speed (skipped, "
                   "failed, invalid or interpreted): see the table on the Environment page or the run table.")
    speeds = page["speeds"]
    st.subheader("Speedups per record")
    table(speeds, "speedups", noise=NOISE_COLUMN, speedup_e2e=st.column_config.NumberColumn(format="%.3fx"),
          speedup_prequant=st.column_config.NumberColumn(format="%.3fx"),
          repro=st.column_config.TextColumn("reproduce", help="the `fp8bench run` command of this record"))
    # The command of one row, in a code block: its copy button puts it on the clipboard, ready for a shell.
    labels = page["labels"]
    chosen = st.selectbox("Reproduce a record", range(len(speeds)), format_func=lambda i: labels[i],
                          key="overview_repro")
    if chosen is not None:
        st.code(speeds["repro"].iloc[int(chosen)], language="bash")


main()
