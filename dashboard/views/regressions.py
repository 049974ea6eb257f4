"""Regressions: the commits at which a case's nightly measurements stepped, newest first (``fp8bench changes``).

Each case's history, per environment and branch, in commit order, is cut by PELT (``ruptures``) where the level of
log(time) changes; a cut is kept when the medians on either side differ by at least the threshold with a bootstrap
interval excluding 1 and a Mann-Whitney p-value under alpha (:mod:`fp8bench.analysis.changes`). A regression is *open*
while the latest commits are still worse than before it. The chart shows the chosen change's case around it: the
dashed line falls between the last good and the first bad commit. A case history shorter than ``min_size``
commits on each side of a possible step is never searched, so with too little history the page says so rather
than "no regression".
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from fp8bench.analysis.bisect import bisected_commit, evidence_folder, load_evidence
from fp8bench.analysis.changes import (
    METRICS,
    ChangeConfig,
    HistoryDepth,
    changes_frame,
    find_changes,
    history_depth,
    history_records,
    rank_changes,
)
from fp8bench.core.commits import commit_order
from fp8bench.dashboard.data import cached, commit_url_template, open_for_page
from fp8bench.dashboard.safe_text import plot_link
from fp8bench.dashboard.widgets import chart, current_view, table
from fp8bench.results.store.queries import RecordFilter


@cached
def _changes(target: str, fingerprint: tuple[int, int, int], flt: RecordFilter,
             config: ChangeConfig) -> tuple[pd.DataFrame, HistoryDepth]:
    history = history_records(open_for_page(target), flt, config.metrics)
    return changes_frame(find_changes(history, config)), history_depth(history, config)


@cached
def _series(target: str, fingerprint: tuple[int, int, int], flt: RecordFilter, key: str,
            metric: str) -> pd.DataFrame:
    history = history_records(open_for_page(target), flt, (metric,))
    history = history.assign(position=commit_order(history))
    return history[history["comparability_key"] == key]


def change_figure(points: pd.DataFrame, change: pd.Series, link: str | None) -> go.Figure:
    metric = str(change["metric"])
    unit = METRICS[metric].unit
    scale, unit = (1e3, "ms") if unit == "s" else (1.0, unit)  # times read in ms, as on every page
    per_commit = points.groupby("position").agg(value=(metric, "median"), commit=("git_commit", "first"))
    per_commit["value"] *= scale
    fig = go.Figure(go.Scatter(x=per_commit.index, y=per_commit["value"], mode="lines+markers",
                               text=per_commit["commit"].astype(str).str.slice(0, 7),
                               hovertemplate="commit %{text}<br>%{y:.4g}<extra></extra>", name=metric))
    cut = int(change["position"]) - 0.5
    fig.add_vline(x=cut, line_dash="dash", line_color="crimson" if change["kind"] == "regression" else "seagreen")
    for start, end, level in ((per_commit.index.min(), cut, change["before"]), (cut, per_commit.index.max(),
                                                                                  change["after"])):
        fig.add_trace(go.Scatter(x=[start, end], y=[level * scale, level * scale], mode="lines", showlegend=False,
                                 line={"color": "grey", "width": 1}))
    title = f"{change['case_key']} · {change['device']}"
    fig.update_layout(height=380, title=title, xaxis_title="commit (first-parent order)",
                      yaxis_title=f"{metric} ({unit})", margin={"l": 10, "r": 10, "t": 50, "b": 10})
    if link:
        fig.add_annotation(x=cut, y=1.05, yref="paper", showarrow=False,
                           text=plot_link(link, f"first bad {str(change['first_bad_commit'])[:7]}"))
    return fig


def main() -> None:
    view = current_view()
    st.title("Regressions")
    c1, c2, c3 = st.columns(3)
    metric = c1.selectbox("Metric", list(METRICS), index=0)
    threshold = c2.number_input("Smallest change (fraction)", min_value=0.01, max_value=0.9, value=0.05, step=0.01)
    show_all = c3.toggle("Also closed regressions and improvements", value=False)
    config = ChangeConfig(metrics=(metric,), threshold=float(threshold))
    found, depth = _changes(view.snapshot.target, view.snapshot.fingerprint, view.query, config)
    # Confirmed changes first: a step carried by noisy nights (load, spread) comes after them, flagged.
    shown = rank_changes(found if show_all else found[(found["kind"] == "regression") & found["open"]])
    template = commit_url_template(view.snapshot.runs)
    rule = (f"a change needs {config.min_size} commits on each side ({depth.needed} in all), a step of at least "
            f"{threshold:.0%} and p < {config.alpha}")
    if not depth.enough:
        st.warning(f"Not enough history to look for regressions: the longest case history in this selection has "
                   f"{depth.longest} commit(s), and {rule}. Nothing can be said yet, either way.")
        st.caption("Measure the same cases on each new commit (a nightly `fp8bench run --suite ...` on the main "
                   "branch, or `fp8bench ingest` of CI run files) and steps will show up here.")
        return
    if shown.empty:
        short = depth.series - depth.judged
        st.success(f"No open regression in the {depth.judged} case history(ies) long enough to judge."
                   if not show_all else "No change in this selection.")
        st.caption(f"{len(found)} change(s) in all; {rule}."
                   + (f" {short} shorter history(ies) could not be judged." if short else ""))
        return
    shown = shown.assign(first_bad_link=shown["first_bad_commit"].map(
        lambda c: template.replace("{commit}", str(c)) if template and c else None))
    # A bisect (`fp8bench bisect`, kept under RESULTS/bisects/) of a change's range names the commit that did it.
    bisects = load_evidence(evidence_folder(view.snapshot.target))
    shown = shown.assign(bisected_commit=[
        ((bisected_commit(bisects, r.case_key, r.last_good_commit, r.first_bad_commit) or {}).get("first_bad")
         or {}).get("sha") for r in shown.itertuples()])
    open_ = (found["kind"] == "regression") & found["open"]
    st.metric("Open regressions", int((open_ & ~found["noisy"].astype(bool)).sum()),
              help=f"confirmed; {int((open_ & found['noisy'].astype(bool)).sum())} more carried by noisy nights")
    linked = ["first_bad_link"] if shown["first_bad_link"].notna().any() else []  # empty links read "None"
    table(shown[["case_key", "device", "size", "noisy", "first_bad_commit", "bisected_commit", *linked,
                 "last_good_commit", "ci_low",
                 "ci_high", "p_value", "metric", "branch", "kind", "open", "first_bad_run", "first_bad_started_at"]],
          "regressions", size=st.column_config.NumberColumn("change", format="percent"),
          noisy=st.column_config.CheckboxColumn("noisy", help="most nights on one side of the step ran under "
                                                "load or spread over the noise band: not confirmed, never alerted"),
          first_bad_commit=st.column_config.TextColumn("first bad", width="small"),
          bisected_commit=st.column_config.TextColumn("bisected", width="small",
                                                      help="the commit `fp8bench bisect` found, when one ran"),
          last_good_commit=st.column_config.TextColumn("last good", width="small"),
          first_bad_link=st.column_config.LinkColumn("commit page", display_text="open"),
          ci_low=st.column_config.NumberColumn("ratio low", format="%.3f"),
          ci_high=st.column_config.NumberColumn("ratio high", format="%.3f"),
          p_value=st.column_config.NumberColumn("p", format="%.2g"))
    labels = [f"{r.first_bad_commit and str(r.first_bad_commit)[:7]} · {r.case_key} · {r.device}"
              for r in shown.itertuples()]
    chosen = st.selectbox("Show", range(len(shown)), format_func=lambda i: labels[i])
    change = shown.iloc[int(chosen)]
    points = _series(view.snapshot.target, view.snapshot.fingerprint, view.query, change["comparability_key"],
                     metric)
    link = change["first_bad_link"] if isinstance(change["first_bad_link"], str) else None
    chart(change_figure(points, change, link), key="regressions_chart")


main()
