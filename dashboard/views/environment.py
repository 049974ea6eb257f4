"""Environment: what produced each run (commit, host, device, software, settings), and how its cases ended.

Every run header stores the git commit and whether the tree was dirty, the host, the device model, the versions
of Python, torch, CUDA and the optional kernel libraries, and the measurement settings. Two runs are only worth
comparing on speed when these match; the gate checks that key before it compares anything.
"""

from __future__ import annotations

import streamlit as st

from fp8bench.dashboard.data import LIST_LIMIT, count_records, list_records
from fp8bench.dashboard.express import px
from fp8bench.dashboard.safe_text import shown
from fp8bench.dashboard.widgets import chart, current_view, nothing_selected, table

STATUS_COLOURS = {"ok": "seagreen", "skipped": "lightgrey", "failed": "crimson", "invalid": "orange"}


def main() -> None:
    view = current_view()
    st.title("Environment")
    runs = view.snapshot.runs
    if view.filters.run_ids:
        runs = runs[runs["run_id"].isin(view.filters.run_ids)]
    if runs.empty:
        nothing_selected("runs")
        return
    outcomes = count_records(view.snapshot, view.query, "run_id", "status")
    if not outcomes.empty:
        fig = px.bar(outcomes, x="run_id", y="records", color="status", color_discrete_map=STATUS_COLOURS,
                     title="Case outcomes per run")
        fig.update_layout(height=320)
        chart(fig, key="environment_outcomes")
    table(runs[["run_id", "started_at", "finished_at", "status", "commit", "git_dirty", "host", "device",
                "device_name", "threads", "torch", "cuda_runtime", "python", "triton", "transformer_engine",
                "torchao", "fp8bench", "os", "energy_method", "suite", "budget_s", "n_records", "source"]], "runs")
    st.subheader("Records that were not measured")
    not_ok = list_records(view.snapshot, view.query, subset="not_ok", columns=("run_id", "case_key", "status",
                                                                                 "reason"))
    if not_ok.empty:
        st.caption("Every selected record was measured.")
    else:
        if len(not_ok) >= LIST_LIMIT:
            st.caption(f"The newest {LIST_LIMIT:,} of them; narrow the filters or the run range to see older ones.")
        table(not_ok[["run_id", "case_key", "status", "reason"]], "not_measured")
    run_id = st.selectbox("Full run header", runs["run_id"].tolist()[::-1])
    st.json(shown(runs.set_index("run_id").at[run_id, "header"]), expanded=False)


main()
