"""History: one metric per commit per device, with the regression gate's verdicts marked.

Each point is a record of one case in one run, placed at the run's start time and labelled with its commit. The
gate (``fp8bench gate``) compares a candidate run against a base run; its verdict is drawn as a vertical line at
the candidate run: green pass, red regression, grey inconclusive, black harness error.
"""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from fp8bench.dashboard.widgets import current_view, nothing_selected, table

METRICS = {"achieved TFLOP/s (end-to-end)": "tflops", "median time (s, end-to-end)": "median_s",
           "pre-quantized median (s)": "prequant_median_s", "% of peak": "pct_of_peak", "SQNR (dB)": "sqnr_db",
           "joules per iteration": "energy_j", "TFLOPS per watt": "tflops_per_w"}
VERDICT_COLOURS = {"pass": "green", "regression": "red", "inconclusive": "grey", "error": "black"}
SPEED_METRICS = {"tflops", "median_s", "prequant_median_s", "pct_of_peak", "energy_j", "tflops_per_w"}
_DEFAULT_CASES = 4


def gate_marks(reports: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Gate reports placed at their candidate run's start time (or, failing that, the report's time)."""
    if reports.empty:
        return reports.assign(x=pd.Series(dtype="object"))
    starts = runs.set_index("run_id")["started_at"]
    x = reports["cand_run_id"].map(starts).fillna(reports["created_at"])
    return reports.assign(x=pd.to_datetime(x, utc=True, format="ISO8601"))


def history_figure(points: pd.DataFrame, metric: str, label: str, marks: pd.DataFrame) -> go.Figure:
    fig = px.line(points, x="when", y=metric, color="case", line_dash="device_label", markers=True,
                  hover_data=["commit", "run_id", "backend"], labels={metric: label, "when": "run start"})
    for mark in marks.itertuples():
        colour = VERDICT_COLOURS.get(str(mark.verdict), "grey")
        fig.add_vline(x=mark.x, line_color=colour, line_dash="dot")
        fig.add_annotation(x=mark.x, y=1.02, yref="paper", text=f"gate: {mark.verdict}", showarrow=False,
                           font={"color": colour}, textangle=-30)
    fig.update_layout(height=480, margin={"l": 10, "r": 10, "t": 60, "b": 10}, legend={"orientation": "h",
                                                                                         "y": -0.25})
    return fig


def main() -> None:
    view = current_view()
    st.title("History")
    label = st.selectbox("Metric", list(METRICS))
    metric = METRICS[label]
    records = view.records[view.records["status"].isin(["ok", "invalid"]) & view.records[metric].notna()]
    if metric in SPEED_METRICS:  # interpreted and invalid timings are never tracked as speed
        records = records[records["valid"] & ~records["interpreted"]]
    if records.empty:
        nothing_selected(f"records with {metric}")
        return
    counts = records.groupby("case_key").size().sort_values(ascending=False)
    cases = st.multiselect("Cases", list(counts.index), default=list(counts.index[:_DEFAULT_CASES]))
    points = records[records["case_key"].isin(cases)].assign(
        when=lambda f: pd.to_datetime(f["started_at"], utc=True, format="ISO8601"), case=lambda f: f["case_key"])
    reports = view.snapshot.gate_reports
    marks = gate_marks(reports, view.snapshot.runs)
    if view.filters.run_ids and not marks.empty:
        marks = marks[marks["cand_run_id"].isin(view.filters.run_ids)]
    if points.empty:
        nothing_selected("cases")
    else:
        st.plotly_chart(history_figure(points, metric, label, marks), key="history_chart")
        table(points[["started_at", "commit", "device_label", "case_key", metric, "run_id"]], "history")
    st.subheader("Gate verdicts")
    if reports.empty:
        st.caption("No gate reports stored yet (`fp8bench gate` writes them).")
    else:
        table(reports[["created_at", "verdict", "exit_code", "git_commit", "base_run_id", "cand_run_id",
                       "report_id"]], "gate_reports")


main()
