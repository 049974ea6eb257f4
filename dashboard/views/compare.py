"""Compare: two runs side by side, each shared case's time ratio with its confidence interval.

The ratio is ``median(candidate samples) / median(base samples)`` of the raw end-to-end timing samples: above 1
the candidate is slower. Its interval is a two-sample bootstrap of that ratio; the p-values are one-sided
Mann-Whitney U tests in each direction (``fp8bench.analysis.stats.compare_samples``, the gate's own arithmetic). A case
whose interval holds 1 has no clear change; a slower or faster case whose ratio lies within either run's noise (its
spread, or the load its run started under: :func:`fp8bench.core.noise.difference_is_noisy`) is ``noisy`` instead,
as the gate says it. Cases are matched by their key (workload, shape, precision, format,
backend, device kind); interpreted, invalid or unmeasured records are listed but never compared.

The page opens on the newest run that shares a measured case with an earlier one, against the newest such run: in a
store that mixes workloads the two latest runs often share nothing (a GEMM sweep, then a collective).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from fp8bench.analysis.stats import compare_samples
from fp8bench.core.noise import difference_is_noisy, run_load
from fp8bench.core.records import case_key
from fp8bench.dashboard.data import StoreProblem, count_records, load_run_payload
from fp8bench.dashboard.safe_text import md_text
from fp8bench.dashboard.widgets import chart, current_view, table

# Newest runs searched for a default pair that shares cases: a year of nightly runs is never read whole for it.
PAIR_SCAN = 40


def sharing_pair(cases: pd.DataFrame, run_order: list[str]) -> tuple[str, str] | None:
    """``(base, candidate)``: the newest run of ``run_order`` (oldest first) that shares a case with an earlier
    one, and the newest such earlier run; ``None`` when no two share a case. ``cases`` has one row per measured
    ``run_id`` and ``case_key``."""
    keys = cases.groupby("run_id")["case_key"].agg(set).to_dict()
    for i in range(len(run_order) - 1, 0, -1):
        candidate = keys.get(run_order[i], set())
        for j in range(i - 1, -1, -1):
            if candidate & keys.get(run_order[j], set()):
                return run_order[j], run_order[i]
    return None


def _comparable(record: dict[str, Any]) -> str | None:
    """Why a record cannot be compared on speed, or ``None`` when it can."""
    if record.get("status") != "ok":
        return f"status {record.get('status')}"
    if record.get("interpreted"):
        return "interpreted timings"
    if not record.get("valid", True):
        return "invalid measurement"
    if len(record.get("samples_s") or []) < 2:
        return "fewer than 2 samples"
    return None


def compare_runs(base: dict[str, Any], cand: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(compared cases with ratio and interval, cases not compared with the reason)."""
    loads = run_load(base.get("run") or {}), run_load(cand.get("run") or {})
    base_recs = {case_key(r): r for r in base["records"]}
    cand_recs = {case_key(r): r for r in cand["records"]}
    rows, skipped = [], []
    for key in sorted(base_recs.keys() | cand_recs.keys()):
        b, c = base_recs.get(key), cand_recs.get(key)
        if b is None or c is None:
            skipped.append({"case_key": key, "reason": "only in the " + ("candidate" if b is None else "base")})
            continue
        why = _comparable(b) or _comparable(c)
        if why:
            skipped.append({"case_key": key, "reason": why})
            continue
        est = compare_samples(b["samples_s"], c["samples_s"])
        verdict = "slower" if est.ci_low > 1 else "faster" if est.ci_high < 1 else "no clear change"
        if verdict != "no clear change" and difference_is_noisy(
                est.ratio, [(b["samples_s"], loads[0]), (c["samples_s"], loads[1])]):
            verdict = "noisy"
        rows.append({"case_key": key, "base_median_s": b["median_s"], "cand_median_s": c["median_s"],
                     "ratio": est.ratio, "ci_low": est.ci_low, "ci_high": est.ci_high, "p_slower": est.p_slower,
                     "p_faster": est.p_faster, "n_base": est.n_base, "n_cand": est.n_cand, "verdict": verdict})
    return pd.DataFrame(rows), pd.DataFrame(skipped, columns=["case_key", "reason"])


def forest_figure(result: pd.DataFrame) -> go.Figure:
    colours = result["verdict"].map({"slower": "crimson", "faster": "seagreen", "no clear change": "grey",
                                     "noisy": "orange"})
    fig = go.Figure(go.Scatter(
        x=result["ratio"], y=result["case_key"], mode="markers", marker={"color": colours, "size": 10},
        error_x={"type": "data", "symmetric": False, "array": result["ci_high"] - result["ratio"],
                 "arrayminus": result["ratio"] - result["ci_low"]},
        hovertemplate="%{y}<br>ratio %{x:.3f}<extra></extra>"))
    fig.add_vline(x=1.0, line_dash="dash")
    fig.update_layout(height=max(300, 80 + 34 * len(result)), xaxis_title="time ratio candidate / base (>1 slower)",
                      margin={"l": 10, "r": 10, "t": 30, "b": 10})
    return fig


def main() -> None:
    view = current_view()
    st.title("Compare two runs")
    runs = view.snapshot.runs.sort_values("started_at")
    if view.filters.run_ids:
        runs = runs[runs["run_id"].isin(view.filters.run_ids)]
    ids = runs["run_id"].tolist()
    if len(ids) < 2:
        st.info("Comparing needs two runs in the selection; run the same cases again "
                "(for example on another commit) and they will appear here.")
        return
    scan = runs.tail(PAIR_SCAN)
    newest = dataclasses.replace(view.query, started_from=max(filter(None, (view.query.started_from,
                                                                            str(scan["started_at"].min())))))
    pair = sharing_pair(count_records(view.snapshot, newest, "run_id", "case_key", subset="speed"),
                        scan["run_id"].tolist())
    base_default, cand_default = pair or (ids[-2], ids[-1])
    labels = {r.run_id: f"{r.run_id} · {r.commit or '-'} · {r.device_name or r.device}" for r in runs.itertuples()}
    col1, col2 = st.columns(2)
    base_id = col1.selectbox("Base run", ids, index=ids.index(base_default), format_func=labels.get)
    cand_id = col2.selectbox("Candidate run", ids, index=ids.index(cand_default), format_func=labels.get)
    if pair is None:
        st.info(f"No two of the newest {len(scan)} runs in the selection share a measured case; pick two runs "
                "that measured the same cases (or run the same cases again, for example on another commit).")
    try:
        base = load_run_payload(view.snapshot.target, base_id)
        cand = load_run_payload(view.snapshot.target, cand_id)
    except StoreProblem as exc:
        st.error(md_text(exc))
        return
    result, skipped = compare_runs(base, cand)
    if result.empty:
        st.info("These runs share no case that both measured validly; see the list below.")
    else:
        chart(forest_figure(result), key="compare_chart")
        conf = 95
        st.caption(f"Bootstrap {conf}% interval of the ratio of medians; one-sided Mann-Whitney p-values. "
                   "noisy (orange): a change within a run's spread, or from a run started under load.")
        table(result, "compare", ratio=st.column_config.NumberColumn(format="%.4f"),
              ci_low=st.column_config.NumberColumn(format="%.4f"),
              ci_high=st.column_config.NumberColumn(format="%.4f"),
              p_slower=st.column_config.NumberColumn(format="%.2e"),
              p_faster=st.column_config.NumberColumn(format="%.2e"))
    if not skipped.empty:
        st.subheader("Not compared")
        table(skipped, "not_compared")


main()
