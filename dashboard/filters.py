"""The sidebar filters, kept in the page URL so that a view can be shared by copying the address.

URL form: ``?device=NVIDIA H100 80GB HBM3&precision=bf16,fp8_rowwise&runs=RUN_A..RUN_B``. Lists are comma-joined;
an absent key means "everything". A value in the URL that matches nothing in the store is dropped with a warning
naming it and the accepted values, so a stale link degrades to a wider view instead of an empty one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import streamlit as st

# URL key -> slim-frame column filtered on.
LIST_FILTERS = {"device": "device_label", "workload": "workload", "backend": "backend", "precision": "precision"}
RUNS_KEY = "runs"
_STATE_PREFIX = "filter_"


@dataclass(frozen=True)
class Filters:
    """What the user chose; empty tuples mean "no restriction"."""

    device: tuple[str, ...] = ()
    workload: tuple[str, ...] = ()
    backend: tuple[str, ...] = ()
    precision: tuple[str, ...] = ()
    run_ids: tuple[str, ...] = field(default=())  # the runs inside the chosen range, () = all

    def apply(self, records: pd.DataFrame) -> pd.DataFrame:
        mask = pd.Series(True, index=records.index)
        for key, column in LIST_FILTERS.items():
            chosen = getattr(self, key)
            if chosen:
                mask &= records[column].isin(chosen)
        if self.run_ids:
            mask &= records["run_id"].isin(self.run_ids)
        return records[mask]


def _split(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]


def _initial(key: str, options: list[str]) -> list[str]:
    """Values for a filter from the URL, keeping only those the store knows."""
    wanted = _split(st.query_params.get(key))
    unknown = [v for v in wanted if v not in options]
    if unknown:
        st.sidebar.warning(f"URL filter {key}={','.join(unknown)} matches no record; "
                           f"accepted: {', '.join(options) or 'none'}")
    return [v for v in wanted if v in options]


def _run_label(runs: pd.DataFrame) -> dict[str, str]:
    """Slider labels; the run id (start time plus a random suffix) keeps two runs of one minute apart."""
    return {r.run_id: f"{r.run_id} {r.commit or '-'}" for r in runs.itertuples()}


def _run_range(runs: pd.DataFrame) -> tuple[str, ...]:
    """A run (and so commit) range slider over runs in time order; returns the run ids inside it."""
    ids = runs.sort_values("started_at")["run_id"].tolist()
    if len(ids) < 2:
        return ()
    ends = tuple((st.query_params.get(RUNS_KEY) or "").split(".."))
    default = (ids[0], ids[-1])
    if len(ends) == 2 and all(e in ids for e in ends):
        default = (ends[0], ends[1])
    elif st.query_params.get(RUNS_KEY) and _STATE_PREFIX + RUNS_KEY not in st.session_state:
        st.sidebar.warning(f"URL filter runs={st.query_params.get(RUNS_KEY)} names unknown runs; "
                           "accepted: FIRST_RUN_ID..LAST_RUN_ID")
    labels = _run_label(runs)
    # value= makes it a range slider; after the first run the widget's own state wins.
    first, last = st.sidebar.select_slider("Runs (time, commit)", options=ids, value=default,
                                           key=_STATE_PREFIX + RUNS_KEY, format_func=lambda i: labels.get(i, i))
    lo, hi = sorted((ids.index(first), ids.index(last)))
    return tuple(ids[lo:hi + 1]) if (lo, hi) != (0, len(ids) - 1) else ()


def render_filters(records: pd.DataFrame, runs: pd.DataFrame) -> Filters:
    """Draw the sidebar filters and mirror them into the URL."""
    st.sidebar.subheader("Filters")
    chosen: dict[str, tuple[str, ...]] = {}
    for key, column in LIST_FILTERS.items():
        options = sorted(str(v) for v in records[column].dropna().unique())
        state_key = _STATE_PREFIX + key
        if state_key not in st.session_state:
            st.session_state[state_key] = _initial(key, options)
        chosen[key] = tuple(st.sidebar.multiselect(key.capitalize(), options, key=state_key,
                                                   placeholder="all"))
    run_ids = _run_range(runs)
    _write_url(chosen, (run_ids[0], run_ids[-1]) if run_ids else None)
    return Filters(**chosen, run_ids=run_ids)


def _write_url(chosen: dict[str, tuple[str, ...]], run_ends: tuple[str, str] | None) -> None:
    wanted = {k: ",".join(v) for k, v in chosen.items() if v}
    if run_ends:
        wanted[RUNS_KEY] = f"{run_ends[0]}..{run_ends[1]}"
    for key in (*LIST_FILTERS, RUNS_KEY):
        if key in wanted:
            if st.query_params.get(key) != wanted[key]:
                st.query_params[key] = wanted[key]
        elif key in st.query_params:
            del st.query_params[key]
