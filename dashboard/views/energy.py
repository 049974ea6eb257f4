"""Energy: joules per iteration and TFLOPS per watt, from the device's energy counter.

On NVIDIA GPUs fp8bench reads NVML's total-energy counter over a looped window long enough to span many counter
updates, so J per iteration is a difference of two counter readings divided by the iteration count. A window in
which the device throttled (power, thermal, clocks) is marked invalid: it is shown here greyed out and excluded
from every comparison. Where no meter exists (a CPU without readable RAPL counters) energy is empty, never zero,
and the reason is stored: the coverage chart shows which records were metered and why the others were not.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from fp8bench.analysis.selection import latest_per_case
from fp8bench.dashboard.data import count_records
from fp8bench.dashboard.express import px
from fp8bench.dashboard.safe_text import md_join
from fp8bench.dashboard.widgets import chart, current_view, nothing_selected, table


def coverage(counts: pd.DataFrame) -> pd.DataFrame:
    """Records per device by energy outcome: measured, measured but invalid, or not metered (with the reason).

    ``counts`` has one row per (device_label, energy_measured, valid, energy_reason) with its ``records`` count."""
    if counts.empty:
        return pd.DataFrame(columns=["device_label", "outcome", "records"])
    measured = counts["energy_measured"].astype(bool)
    valid = counts["valid"].astype(bool)
    outcome = pd.Series("not metered: " + counts["energy_reason"].fillna("no reason stored"), index=counts.index)
    outcome[measured & valid] = "measured"
    outcome[measured & ~valid] = "measured, excluded (invalid)"
    return (counts.assign(outcome=outcome).groupby(["device_label", "outcome"])["records"].sum()
            .reset_index())


def main() -> None:
    view = current_view()
    st.title("Energy")
    records = view.records[view.records["status"].isin(["ok", "invalid"])]
    if records.empty:
        nothing_selected("measured records")
        return
    cov = coverage(count_records(view.snapshot, view.query, "device_label", "energy_measured", "valid",
                                 "energy_reason", subset="measured"))
    fig = px.bar(cov, x="device_label", y="records", color="outcome", labels={"device_label": "device"},
                 title="Energy coverage")
    fig.update_layout(height=320, legend={"orientation": "h", "y": -0.3})
    chart(fig, key="energy_coverage")
    table(cov, "energy_coverage")
    measured = latest_per_case(records[records["energy_j"].notna() & ~records["interpreted"]]).copy()
    if measured.empty:
        reasons = sorted(records["energy_reason"].dropna().unique())
        st.info("No record in this selection has an energy measurement. "
                + ("Reason stored: " + md_join(reasons, "; ") if reasons else ""))
        return
    measured["case"] = measured["workload"] + " " + measured["shape_label"] + " · " + measured["backend"]
    measured["included"] = measured["valid"].map({True: "valid", False: "excluded: invalid (throttled)"})
    for metric, label in (("energy_j", "joules per iteration"), ("tflops_per_w", "TFLOPS per watt")):
        fig = px.bar(measured, x="case", y=metric, color="precision", barmode="group", pattern_shape="included",
                     pattern_shape_map={"valid": "", "excluded: invalid (throttled)": "x"}, opacity=0.9,
                     facet_row="device_label" if measured["device_label"].nunique() > 1 else None,
                     labels={metric: label}, hover_data=["energy_reason", "avg_power_w", "run_id"])
        fig.update_layout(height=420)
        chart(fig, key=f"energy_{metric}")
    excluded = measured[~measured["valid"]]
    if not excluded.empty:
        st.warning(f"{len(excluded)} measurement(s) excluded as invalid (hatched above); reasons: "
                   + md_join(sorted(excluded["energy_reason"].dropna().unique()), "; "))
    table(measured[["device_label", "workload", "shape_label", "precision", "backend", "energy_j", "avg_power_w",
                    "tflops_per_w", "valid", "energy_reason", "run_id"]], "energy")


main()
