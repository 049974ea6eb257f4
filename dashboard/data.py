"""Data access for the dashboard: the only module that talks to the store, and only through its public API.

A store of a year of nightly runs holds about a million records; the dashboard never reads them all. It reads the
filter choices and the run list once per store state (:func:`load_snapshot`), then asks the database for what a
page draws, with the sidebar's filters as SQL (:mod:`fp8bench.results.store.queries`): the latest record of each case
per device (:func:`load_records`, what most pages show), counts per group, or one case's history. Every query
reads the store's typed columns, never the record JSON; raw samples and loss curves are fetched per run or per
record, on demand (:func:`load_run_payload`). Results are kept by ``st.cache_data`` (a cache hit copies a small
frame of scalars: milliseconds).

Cache keys include a cheap fingerprint of the store (highest record id, run and gate-report counts), so a new run
shows up on the next rerun without a manual refresh, while an unchanged store is read once.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa
import streamlit as st

from fp8bench.analysis.selection import LATEST_CLASSES, speed_comparable_sql
from fp8bench.core.commits import checkout_remote, url_template
from fp8bench.core.noise import is_noisy, record_spread, run_load
from fp8bench.core.redact import error_line, redact
from fp8bench.core.run_header import RunHeader, load_header, stored_schema_version
from fp8bench.core.shapes import shape_label
from fp8bench.paths import default_results_dir
from fp8bench.results.store import Store, StoreError, normalize_url, open_store
from fp8bench.results.store import queries as store_queries
from fp8bench.results.store.queries import RecordFilter

# Named record subsets a page may count or list (SQL conditions on typed columns).
SUBSETS = {"all": sa.true(), "measured": store_queries.R.status.in_(store_queries.MEASURED),
           "not_ok": store_queries.R.status != "ok", "speed": speed_comparable_sql()}

STORE_ENV = "FP8BENCH_DASHBOARD_STORE"
REPO_URL_ENV = "FP8BENCH_REPO_URL"  # commit link template or repository address (`fp8bench dashboard --repo-url`)
FILL_COMMAND = "fp8bench run --suite smoke"
PHASE_PREFIX = store_queries.PHASE_PREFIX
# Rows a page lists at most from a long history (the newest first); the CSV download has the same rows.
LIST_LIMIT = 2000


class StoreProblem(Exception):
    """The store cannot be read; the message is meant for the page, not a traceback."""


@dataclass(frozen=True)
class Snapshot:
    """What every page needs whatever the filters: the filter choices, the runs and the gate reports."""

    target: str
    fingerprint: tuple[int, int, int]
    options: pd.DataFrame  # distinct device_label x workload x backend x precision x git_branch, with counts
    runs: pd.DataFrame  # one row per run, environment flattened
    gate_reports: pd.DataFrame

    @property
    def empty(self) -> bool:
        return self.options.empty


def store_target() -> str:
    """The store to show: ``--store``/``--results-dir`` after ``--`` on the streamlit command line, then
    ``$FP8BENCH_DASHBOARD_STORE`` (set by ``fp8bench dashboard``), then the default results folder."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--store")
    parser.add_argument("--results-dir")
    args, _ = parser.parse_known_args(sys.argv[1:])
    target = args.store or args.results_dir or os.environ.get(STORE_ENV) or default_results_dir()
    return str(target)


def commit_url_template(runs: pd.DataFrame) -> str | None:
    """The link template of a commit page (with ``{commit}``): ``--repo-url`` after ``--`` on the streamlit
    command line or ``$FP8BENCH_REPO_URL``, else the remote recorded by the newest run that has one, else the
    ``origin`` remote of the checkout the dashboard runs in; ``None`` when none is known."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--repo-url")
    args, _ = parser.parse_known_args(sys.argv[1:])
    given = args.repo_url or os.environ.get(REPO_URL_ENV)
    if given:
        return url_template(given)
    recorded = runs.sort_values("started_at")["remote"].dropna() if "remote" in runs else pd.Series(dtype=object)
    if not recorded.empty:
        return url_template(str(recorded.iloc[-1]))
    return url_template(_checkout_remote())


@st.cache_resource(show_spinner=False)
def _checkout_remote() -> str | None:
    return checkout_remote()


def _sqlite_file(target: str) -> Path | None:
    url = normalize_url(target)
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


@st.cache_resource(show_spinner=False)
def _store(target: str) -> Store:
    return open_store(target, read_only=True)


def open_for_page(target: str) -> Store:
    """The (cached) store of a page's own cached query; :class:`StoreProblem` when it cannot be opened."""
    try:
        return _store(target)
    except StoreError as exc:
        raise StoreProblem(str(exc)) from exc


def _open(target: str) -> Store | None:
    """The store at ``target``; ``None`` when a local SQLite file does not exist yet (never created here)."""
    path = _sqlite_file(target)
    if path is not None and not path.exists():
        return None
    try:
        return _store(target)
    except StoreError as exc:
        raise StoreProblem(str(exc)) from exc


def phase_columns(records: pd.DataFrame) -> list[str]:
    """The ``phase:NAME`` columns of a records frame."""
    return [c for c in records.columns if str(c).startswith(PHASE_PREFIX)]


def enrich(frame: pd.DataFrame, losses: dict[int, list[float] | None] | None = None) -> pd.DataFrame:
    """Derived columns the pages share: labels, short commit, arithmetic intensity, loss curves."""
    out = frame.copy()
    out["started_at"] = out["run_started_at"]
    out["shape_label"] = out["shape"].map(shape_label)
    out["device_label"] = store_queries.device_labels(out)
    out["commit"] = out["git_commit"].fillna("").astype(str).str.slice(0, 7)
    out["intensity"] = pd.to_numeric(out["flops"], errors="coerce") / pd.to_numeric(out["bytes"], errors="coerce")
    for col in ("valid", "interpreted", "has_losses"):
        out[col] = out[col].astype("boolean").fillna(col == "valid").astype(bool)
    out["losses"] = out["id"].map(lambda i: (losses or {}).get(int(i)))
    return out


def loss_curve(record: dict[str, Any]) -> list[float] | None:
    """Per-step training losses of a record (``extra.losses`` of a ``transformer_step`` convergence record);
    a non-finite loss is stored as ``null`` and comes back as NaN."""
    value = (record.get("extra") or {}).get("losses")
    if not isinstance(value, list) or not value:
        return None
    if not all(v is None or isinstance(v, (int, float)) for v in value):
        return None
    return [float("nan") if v is None else float(v) for v in value]


def _flatten_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The store's runs with the header's values the pages show as columns; ``header`` keeps the whole JSON."""
    data = runs["data"].map(lambda d: d if isinstance(d, dict) else {})
    headers = [load_header(d, stored_schema_version(v)) for d, v in zip(data, runs["schema_version"], strict=True)]
    out = runs.drop(columns=["data"]).copy()
    out["header"] = data  # the whole run header, small: one per run
    columns: dict[str, Callable[[RunHeader], object]] = {
        key: lambda h, key=key: getattr(h.software, key)
        for key in ("torch", "python", "cuda_runtime", "triton", "transformer_engine", "torchao", "fp8bench")}
    columns |= {"os": lambda h: h.host.os, "threads": lambda h: h.device.threads,
               "energy_method": lambda h: h.energy_method, "budget_s": lambda h: h.setting("budget_s"),
               "suite": lambda h: (h.spec or {}).get("suite"), "n_records": lambda h: h.n_records,
               "remote": lambda h: h.git.remote}
    for name, read in columns.items():
        out[name] = pd.Series([read(h) for h in headers], index=out.index, dtype=object).infer_objects()
    out["commit"] = out["git_commit"].fillna("").str.slice(0, 7)
    # the host's load when the run started (fp8bench.core.noise); None in older runs
    load = pd.Series([run_load(h) for h in headers], index=out.index, dtype=object)
    out["load_avg_1m"] = load.map(lambda v: v.load_1m if v else None)
    out["loaded"] = load.map(lambda v: bool(v and v.overloaded))
    return out


def _problem(store: Store, exc: Exception) -> StoreProblem:
    return StoreProblem(f"cannot read store {store.url}: {error_line(exc)}")


@st.cache_data(show_spinner="Reading the store...", max_entries=4)
def _catalog(target: str, fingerprint: tuple[int, int, int]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    store = _store(target)
    options = store_queries.filter_options(store)
    runs = _flatten_runs(store.runs_frame())
    return options, runs, store.gate_reports_frame().drop(columns=["data"])


def load_snapshot(target: str) -> Snapshot:
    """The store's filter choices, runs and gate reports; raises :class:`StoreProblem` with a readable message."""
    store = _open(target)
    if store is None:
        empty = pd.DataFrame(columns=["run_id"])
        return Snapshot(target, (0, 0, 0), pd.DataFrame(), empty, empty)
    try:
        fingerprint = store_queries.store_fingerprint(store)
        options, runs, reports = _catalog(target, fingerprint)
    except (StoreError, sa.exc.SQLAlchemyError) as exc:
        raise _problem(store, exc) from exc
    return Snapshot(target, fingerprint, options, runs, reports)


def _query(snapshot: Snapshot, read: Callable[[Store], pd.DataFrame]) -> pd.DataFrame:
    store = _store(snapshot.target)
    try:
        return read(store)
    except (StoreError, sa.exc.SQLAlchemyError) as exc:
        raise _problem(store, exc) from exc


@dataclass(frozen=True)
class LatestRead:
    """Which latest records a page reads: the records of ``subsets`` (names of
    :data:`fp8bench.analysis.selection.LATEST_CLASSES`; ``None``: every one) and whether their ``phase:NAME``
    columns. Each subset costs the database a condition evaluated on every stored record (about 0.1 s of CPU per
    million records on SQLite), and the phases a second query, so a page that needs less asks for less."""

    subsets: tuple[str, ...] | None = None
    phases: bool = True

    def __post_init__(self) -> None:
        unknown = [name for name in self.subsets or () if name not in LATEST_CLASSES]
        if unknown:
            raise ValueError(f"unknown record subset {', '.join(unknown)}; accepted: {', '.join(LATEST_CLASSES)}")

    def classes(self) -> dict[str, Any]:
        return {name: LATEST_CLASSES[name] for name in self.subsets or LATEST_CLASSES}


@st.cache_data(show_spinner="Reading the latest records...", max_entries=16)
def _latest(target: str, fingerprint: tuple[int, int, int], flt: RecordFilter, read: LatestRead) -> pd.DataFrame:
    store = _store(target)
    frame = store_queries.latest_records(store, read.classes(), flt, with_phases=read.phases)
    curves = frame.loc[frame["has_losses"].fillna(False).astype(bool), "id"].tolist()
    losses = {i: loss_curve(r) for i, r in store_queries.record_json(store, curves).items()}
    return enrich(frame, losses)


def load_records(snapshot: Snapshot, flt: RecordFilter, read: LatestRead = LatestRead()) -> pd.DataFrame:
    """The latest record of each case per device label under the filter, overall and in each subset ``read``
    names (by default every one: the speed-comparable, metered, numerics and loss-curve records), oldest first, with
    derived columns (:func:`enrich`, :func:`with_noise`)."""
    return with_noise(_query(snapshot, lambda _store: _latest(snapshot.target, snapshot.fingerprint, flt, read)),
                      snapshot.runs)


def with_noise(records: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Add ``noise`` (the relative spread of each record's samples, IQR / median) and ``noisy``, by the rule the run
    table and the gate use (:func:`fp8bench.core.noise.is_noisy`): spread over the threshold, or a run started with the
    host overloaded."""
    out = records.copy()
    loaded = set(runs.loc[runs["loaded"].astype(bool), "run_id"]) if "loaded" in runs else set()
    out["noise"] = [record_spread({"iqr_s": i, "median_s": m}) for i, m in zip(out["iqr_s"], out["median_s"],
                                                                              strict=True)]
    out["noisy"] = [is_noisy(None if pd.isna(s) else s, run in loaded) if pd.notna(m) else False
                    for s, run, m in zip(out["noise"], out["run_id"], out["median_s"], strict=True)]
    return out


@st.cache_data(show_spinner=False, max_entries=32)
def _counts(target: str, fingerprint: tuple[int, int, int], flt: RecordFilter, groups: tuple[str, ...],
            subset: str) -> pd.DataFrame:
    return store_queries.count_records_by(_store(target), flt, *groups, where=[SUBSETS[subset]])


def count_records(snapshot: Snapshot, flt: RecordFilter, *groups: str, subset: str = "all") -> pd.DataFrame:
    """Record counts per group under the filter; ``subset`` names one of :data:`SUBSETS`."""
    return _query(snapshot, lambda _store: _counts(snapshot.target, snapshot.fingerprint, flt, groups, subset))


@st.cache_data(show_spinner=False, max_entries=32)
def _listed(target: str, fingerprint: tuple[int, int, int], flt: RecordFilter, subset: str,
            columns: tuple[str, ...] | None, limit: int | None, cases: tuple[str, ...]) -> pd.DataFrame:
    where = [SUBSETS[subset]]
    if cases:
        where.append(store_queries.R.case_key.in_(list(cases)))
    frame = store_queries.select_records(_store(target), flt, columns, where, limit, newest_first=limit is not None)
    return frame.iloc[::-1].reset_index(drop=True) if limit is not None else frame


def list_records(snapshot: Snapshot, flt: RecordFilter, subset: str = "all", columns: tuple[str, ...] | None = None,
                 limit: int | None = LIST_LIMIT, cases: tuple[str, ...] = ()) -> pd.DataFrame:
    """Records under the filter in run order (the newest ``limit`` when given), typed columns only."""
    return _query(snapshot, lambda _store: _listed(snapshot.target, snapshot.fingerprint, flt, subset, columns,
                                                   limit, cases))


@st.cache_data(show_spinner="Reading run samples...", max_entries=16)
def load_run_payload(target: str, run_id: str) -> dict[str, Any]:
    """A stored run with every record and its raw samples (for the Compare page)."""
    store = _open(target)
    if store is None:
        raise StoreProblem(redact(f"no store at {target}"))
    try:
        return store.run_payload(run_id)
    except (StoreError, sa.exc.SQLAlchemyError) as exc:
        raise StoreProblem(error_line(exc) if isinstance(exc, sa.exc.SQLAlchemyError) else str(exc)) from exc


def cached(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``st.cache_data`` for a page's own derived table, registered so that "Reload store" clears it too. A page
    script runs again on every rerun and defines its functions anew: one registration per file and function."""
    wrapped = st.cache_data(show_spinner=False, max_entries=8)(fn)
    _PAGE_CACHES[f"{fn.__code__.co_filename}:{fn.__qualname__}"] = wrapped
    return wrapped


_PAGE_CACHES: dict[str, Any] = {}


def clear_caches() -> None:
    for fn in (_catalog, _latest, _counts, _listed, load_run_payload, *_PAGE_CACHES.values()):
        fn.clear()
