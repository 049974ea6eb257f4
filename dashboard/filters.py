"""The sidebar filters, kept in the page URL so that a view can be shared by copying the address.

URL form: ``?device=NVIDIA H100 80GB HBM3&precision=bf16,fp8_rowwise&branch=main&runs=RUN_A..RUN_B``. Lists are
comma-joined;
an absent key means "everything". A value in the URL that matches nothing in the store is dropped with a warning
naming it and the accepted values, so a stale link degrades to a wider view instead of an empty one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import streamlit as st

from fp8bench.dashboard.safe_text import md_join, md_text
from fp8bench.results.store.queries import RecordFilter

# URL key -> column of the store's filter choices (``Snapshot.options``).
LIST_FILTERS = {"device": "device_label", "workload": "workload", "backend": "backend", "precision": "precision",
                "branch": "git_branch"}
RUNS_KEY = "runs"
_STATE_PREFIX = "filter_"


@dataclass(frozen=True)
class Filters:
    """What the user chose; empty tuples mean "no restriction"."""

    device: tuple[str, ...] = ()
    workload: tuple[str, ...] = ()
    backend: tuple[str, ...] = ()
    precision: tuple[str, ...] = ()
    branch: tuple[str, ...] = ()
    run_ids: tuple[str, ...] = field(default=())  # the runs inside the chosen range, () = all
    run_starts: tuple[str, str] | None = None  # start times of the range's first and last run

    def query(self) -> RecordFilter:
        """The same choice as a store query filter (the run range as run start times)."""
        lo, hi = self.run_starts or (None, None)
        return RecordFilter(device=self.device, workload=self.workload, backend=self.backend,
                            precision=self.precision, branch=self.branch, started_from=lo, started_to=hi)


def _split(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]


def _initial(key: str, options: list[str]) -> list[str]:
    """Values for a filter from the URL, keeping only those the store knows."""
    wanted = _split(st.query_params.get(key))
    unknown = [v for v in wanted if v not in options]
    if unknown:
        st.sidebar.warning(f"URL filter {key}={md_join(unknown, ',')} matches no record; "
                           f"accepted: {md_join(options) or 'none'}")
    return [v for v in wanted if v in options]


def _run_label(runs: pd.DataFrame) -> dict[str, str]:
    """Slider labels short enough for the sidebar (a whole run id and commit were clipped at its edge): the start
    to the minute (UTC) and the short commit; two runs of one minute and commit add their run id's suffix."""
    labels = {r.run_id: f"{str(r.started_at)[5:16].replace('T', ' ')} {(r.commit or '-')[:7]}"
              for r in runs.itertuples()}
    twice = {label for label in labels.values() if list(labels.values()).count(label) > 1}
    return {run: f"{label} {run.rsplit('-', 1)[-1]}" if label in twice else label for run, label in labels.items()}


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
        st.sidebar.warning(f"URL filter runs={md_text(st.query_params.get(RUNS_KEY))} names unknown runs; "
                           "accepted: FIRST_RUN_ID..LAST_RUN_ID")
    labels = _run_label(runs)
    # value= makes it a range slider; after the first run the widget's own state wins.
    first, last = st.sidebar.select_slider("Runs (time, commit)", options=ids, value=default,
                                           key=_STATE_PREFIX + RUNS_KEY, format_func=lambda i: labels.get(i, i))
    lo, hi = sorted((ids.index(first), ids.index(last)))
    # The slider centres its end labels on the thumbs, so the right one runs past the sidebar's edge.
    st.sidebar.caption(md_text(f"runs {labels.get(ids[lo], ids[lo])} to {labels.get(ids[hi], ids[hi])} (UTC)"))
    return tuple(ids[lo:hi + 1]) if (lo, hi) != (0, len(ids) - 1) else ()


def render_filters(options_frame: pd.DataFrame, runs: pd.DataFrame) -> Filters:
    """Draw the sidebar filters from the store's filter choices and mirror them into the URL."""
    st.sidebar.subheader("Filters")
    chosen: dict[str, tuple[str, ...]] = {}
    for key, column in LIST_FILTERS.items():
        options = sorted(str(v) for v in options_frame[column].dropna().unique())
        if key == "branch" and not options:
            continue  # runs recorded no branch: no filter to offer
        state_key = _STATE_PREFIX + key
        if state_key not in st.session_state:
            st.session_state[state_key] = _initial(key, options)
        chosen[key] = tuple(st.sidebar.multiselect(key.capitalize(), options, key=state_key,
                                                   placeholder="all"))
    run_ids = _run_range(runs)
    _write_url(chosen, (run_ids[0], run_ids[-1]) if run_ids else None)
    starts = None
    if run_ids:
        when = runs.set_index("run_id")["started_at"]
        starts = (str(when[run_ids[0]]), str(when[run_ids[-1]]))
    return Filters(**chosen, run_ids=run_ids, run_starts=starts)


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
