"""History: one metric per commit along a branch, per device and case, with the gate's verdicts marked.

The x-axis is commit order on the chosen branch (first-parent order, :mod:`fp8bench.core.commits`), not wall-clock
time: a rerun of an old commit lands on that commit, and nights without a new commit add no gap. Several runs of
one commit stack at its position. Each tick and each row of the table links to the commit's page (``--repo-url``,
or the git remote the runs recorded). Long histories are thinned for drawing only: per case, at most
:data:`MAX_POINTS` points, keeping each stretch's minimum and maximum so that spikes and steps stay visible; the
table and the CSV keep every point. The regression gate (``fp8bench gate``) draws its verdict at the candidate
run's commit: green pass, red regression, grey inconclusive, black harness error.

Below the metric, the device's state while each point was timed (GPUs): the median SM clock and board power through
the timed samples, on the same commit axis, so a slow night can be told from a hot or throttled one. Records without
device telemetry (the CPU, runs before it was recorded) leave it out and say so.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from fp8bench.core.commits import commit_link, commit_order
from fp8bench.dashboard.data import commit_url_template, count_records, list_records
from fp8bench.dashboard.express import px
from fp8bench.dashboard.safe_text import plot_link
from fp8bench.dashboard.widgets import chart, current_view, downsample, nothing_selected, table

METRICS = {"achieved TFLOP/s (end-to-end)": "tflops", "median time (ms, end-to-end)": "median_s",
           "pre-quantized median (ms)": "prequant_median_s", "% of peak": "pct_of_peak", "SQNR (dB)": "sqnr_db",
           "joules per iteration": "energy_j", "TFLOPS per watt": "tflops_per_w"}
# Stored metric -> the factor to the unit its label names (records keep seconds; the chart reads in ms).
DRAWN_SCALE = {"median_s": 1e3, "prequant_median_s": 1e3}
VERDICT_COLOURS = {"pass": "green", "regression": "red", "inconclusive": "grey", "noisy": "orange", "error": "black"}
SPEED_METRICS = {"tflops", "median_s", "prequant_median_s", "pct_of_peak", "energy_j", "tflops_per_w"}
POINT_COLUMNS = ("id", "run_id", "seq", "case_key", "device_name", "device", "git_commit", "git_branch",
                 "commit_depth", "commit_time", "run_started_at", "status", "valid", "interpreted", "backend")
# Device state through the timed samples (store schema 6), drawn under the metric: column -> axis title.
DEVICE_STATE = {"sm_clock_mhz": "SM clock (MHz)", "timed_power_w": "power (W)"}
_DEFAULT_CASES = 4
_NO_BRANCH = "(no branch recorded)"


def gate_marks(reports: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Gate reports placed at their candidate run's commit position (reports of runs not shown are dropped)."""
    if reports.empty or points.empty:
        return reports.iloc[0:0].assign(x=pd.Series(dtype="float"))
    where = points.drop_duplicates("run_id").set_index("run_id")["position"]
    placed = reports.assign(x=reports["cand_run_id"].map(where))
    return placed[placed["x"].notna()]


def history_figure(points: pd.DataFrame, metric: str, label: str, marks: pd.DataFrame,
                   ticks: pd.DataFrame) -> go.Figure:
    fig = px.line(points, x="position", y=metric, color="case", line_dash="device_label", markers=True,
                  hover_data=["commit", "run_id", "backend", "device_label"],
                  labels={metric: label, "position": "commit (first-parent order on the branch)"})
    for mark in marks.itertuples():
        colour = VERDICT_COLOURS.get(str(mark.verdict), "grey")
        fig.add_vline(x=mark.x, line_color=colour, line_dash="dot")
        # Above the plot area, its bottom on the top edge: never over the points.
        fig.add_annotation(x=mark.x, y=1.0, yref="paper", yanchor="bottom", text=f"gate: {mark.verdict}",
                           showarrow=False, font={"color": colour})
    # Tick labels are the short hashes, each a link to the commit's page when a template is known.
    step = max(1, len(ticks) // 40)
    shown = ticks.iloc[::step]
    fig.update_xaxes(tickmode="array", tickvals=shown["position"].tolist(), ticktext=shown["tick"].tolist(),
                     tickangle=-45)
    fig.update_layout(height=520, margin={"l": 10, "r": 10, "t": 60, "b": 10},
                      legend={"orientation": "h", "y": -0.35})
    return fig


def device_state_figure(points: pd.DataFrame, ticks: pd.DataFrame) -> go.Figure:
    """SM clock and power per point, one panel each, on the metric chart's commit axis."""
    fig = make_subplots(rows=len(DEVICE_STATE), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=list(DEVICE_STATE.values()))
    colours = px.colors.qualitative.Plotly
    for i, ((case, device), group) in enumerate(points.groupby(["case", "device_label"], sort=False)):
        for row, column in enumerate(DEVICE_STATE, start=1):
            fig.add_trace(go.Scatter(x=group["position"], y=group[column], mode="lines+markers",
                                     name=f"{case} · {device}", legendgroup=f"{case} · {device}",
                                     showlegend=row == 1, line={"color": colours[i % len(colours)]}),
                          row=row, col=1)
    for row, title in enumerate(DEVICE_STATE.values(), start=1):
        fig.update_yaxes(title_text=title, row=row, col=1)
    step = max(1, len(ticks) // 40)
    shown = ticks.iloc[::step]
    fig.update_xaxes(tickmode="array", tickvals=shown["position"].tolist(), ticktext=shown["tick"].tolist(),
                     tickangle=-45, row=len(DEVICE_STATE), col=1)
    fig.update_layout(height=460, margin={"l": 10, "r": 10, "t": 40, "b": 10}, legend={"orientation": "h", "y": -0.3})
    return fig


def points_table(points: pd.DataFrame, metric: str) -> None:
    """Every point of the chart; the commit page's column only where a link template is known (a column of empty
    links reads "None")."""
    linked = ["commit_url"] if points["commit_url"].notna().any() else []
    table(points[["position", "commit", *linked, "run_started_at", "device_label", "case_key", metric,
                  *DEVICE_STATE, "run_id"]].sort_values(["position", "run_started_at"]), "history",
          **({"commit_url": st.column_config.LinkColumn("commit page", display_text="open")} if linked else {}))


def main() -> None:
    view = current_view()
    st.title("History by commit")
    c1, c2 = st.columns([2, 1])
    label = c1.selectbox("Metric", list(METRICS))
    metric = METRICS[label]
    subset = "speed" if metric in SPEED_METRICS else "measured"  # interpreted or invalid timings are not speed
    branches = count_records(view.snapshot, view.query, "git_branch", subset=subset)
    if branches.empty:
        nothing_selected(f"records with {metric}")
        return
    branches = branches.assign(name=branches["git_branch"].fillna(_NO_BRANCH)).sort_values("records",
                                                                                             ascending=False)
    names = branches["name"].tolist()
    branch = c2.selectbox("Branch", names, index=names.index("main") if "main" in names else 0)
    counts = count_records(view.snapshot, view.query, "case_key", "git_branch", subset=subset)
    counts = counts[counts["git_branch"].fillna(_NO_BRANCH) == branch].sort_values("records", ascending=False)
    cases = st.multiselect("Cases", counts["case_key"].tolist(), default=counts["case_key"].tolist()[:_DEFAULT_CASES])
    if not cases:
        nothing_selected("cases")
        return
    on_branch = list_records(view.snapshot, view.query, subset=subset,
                             columns=(*POINT_COLUMNS, metric, *DEVICE_STATE), limit=None, cases=tuple(cases))
    on_branch = on_branch[on_branch["git_branch"].fillna(_NO_BRANCH) == branch]
    points = on_branch[on_branch[metric].notna()].copy()
    if points.empty:
        nothing_selected(f"records with {metric} on {branch}")
        return
    points["position"] = commit_order(points)
    points["case"] = points["case_key"]
    points["commit"] = points["git_commit"].fillna("").astype(str).str.slice(0, 7)
    template = commit_url_template(view.snapshot.runs)
    points["commit_url"] = points["git_commit"].map(lambda c: commit_link(template, c))
    ticks = points.drop_duplicates("position").sort_values("position")[["position", "commit", "commit_url"]]
    ticks["tick"] = [plot_link(u, c or "?") for c, u in zip(ticks["commit"], ticks["commit_url"], strict=True)]
    points["drawn"] = points[metric] * DRAWN_SCALE.get(metric, 1.0)
    drawn = pd.concat([downsample(g, "position", "drawn") for _, g in points.groupby(["case", "device_label"])])
    marks = gate_marks(view.snapshot.gate_reports, points)
    chart(history_figure(drawn.sort_values("position"), "drawn", label, marks, ticks), key="history_chart")
    if len(drawn) < len(points):
        st.caption(f"{len(points):,} points, {len(drawn):,} drawn (each stretch's minimum and maximum kept); "
                   "the table has them all.")
    st.subheader("Device state while timed")
    with_state = points[points[list(DEVICE_STATE)].notna().any(axis=1)]
    if with_state.empty:
        st.caption("No SM clock or power recorded for these points (CPU runs, or runs before device state was "
                   "recorded).")
    else:
        chart(device_state_figure(with_state.sort_values("position"), ticks), key="device_state_chart")
    points_table(points, metric)
    st.subheader("Gate verdicts")
    reports = view.snapshot.gate_reports
    if reports.empty:
        st.caption("No gate reports stored yet (`fp8bench gate` writes them).")
    else:
        table(reports[["created_at", "verdict", "exit_code", "git_commit", "base_run_id", "cand_run_id",
                       "report_id"]], "gate_reports")


main()
