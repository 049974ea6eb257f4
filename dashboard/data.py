"""Data access for the dashboard: the only module that talks to the store, and only through its public API.

The store hands back one row per record with the full record JSON in a ``data`` column. The dashboard never
needs the raw timing samples of 100,000 records at once, so :func:`slim_records` flattens each record into plain
columns (phases, numerics, ceilings, energy reason, loss curve) and drops the JSON. That slim frame is what
``st.cache_data`` keeps: a cache hit copies it (Streamlit pickles cached values), and a frame of scalars copies
in milliseconds where one holding every sample list would not. Raw samples are fetched per run, on demand, for
the Compare page (:func:`load_run_payload`).

Cache keys include a cheap fingerprint of the store (record and gate-report counts), so a new run shows up
on the next rerun without a manual refresh, while an unchanged store is read once.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa
import streamlit as st

from fp8bench.paths import default_results_dir
from fp8bench.store import Store, StoreError, normalize_url, open_store

STORE_ENV = "FP8BENCH_DASHBOARD_STORE"
FILL_COMMAND = "fp8bench run --suite smoke"

# Record fields copied as-is from the record JSON (the store has no column for them).
_DATA_FIELDS = ("flops", "bytes", "gbps", "peak_tflops", "peak_source", "peak_mem_tbps", "avg_power_w", "n",
                "iqr_s", "rsd")
_NUMERICS_FIELDS = ("max_abs_err", "overflow_frac", "underflow_frac")
PHASE_PREFIX = "phase:"


class StoreProblem(Exception):
    """The store cannot be read; the message is meant for the page, not a traceback."""


@dataclass(frozen=True)
class Snapshot:
    """Everything the pages read, loaded once per store state."""

    target: str
    records: pd.DataFrame  # slim: one row per record, no raw samples
    runs: pd.DataFrame  # one row per run, environment flattened
    gate_reports: pd.DataFrame

    @property
    def empty(self) -> bool:
        return self.records.empty

    @property
    def phase_columns(self) -> list[str]:
        return [c for c in self.records.columns if c.startswith(PHASE_PREFIX)]


def store_target() -> str:
    """The store to show: ``--store``/``--results-dir`` after ``--`` on the streamlit command line, then
    ``$FP8BENCH_DASHBOARD_STORE`` (set by ``fp8bench dashboard``), then the default results folder."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--store")
    parser.add_argument("--results-dir")
    args, _ = parser.parse_known_args(sys.argv[1:])
    target = args.store or args.results_dir or os.environ.get(STORE_ENV) or default_results_dir()
    return str(target)


def _sqlite_file(target: str) -> Path | None:
    url = normalize_url(target)
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


@st.cache_resource(show_spinner=False)
def _store(target: str) -> Store:
    return open_store(target)


def _open(target: str) -> Store | None:
    """The store at ``target``; ``None`` when a local SQLite file does not exist yet (never created here)."""
    path = _sqlite_file(target)
    if path is not None and not path.exists():
        return None
    try:
        return _store(target)
    except StoreError as exc:
        raise StoreProblem(str(exc)) from exc


def _fingerprint(store: Store) -> tuple[int, int]:
    """Counts that change whenever a record or a gate report is added (a run shows once it has records)."""
    return store.count_records(), len(store.gate_reports_frame())


def slim_records(frame: pd.DataFrame) -> pd.DataFrame:
    """Flatten ``records_frame(with_data=True)`` into scalar columns and drop the record JSON."""
    data = frame["data"].map(lambda d: d if isinstance(d, dict) else {})
    out = frame.drop(columns=["data"]).copy()
    for name in _DATA_FIELDS:
        out[name] = data.map(lambda d, name=name: d.get(name))
    numerics = data.map(lambda d: d.get("numerics") or {})
    for name in _NUMERICS_FIELDS:
        out[name] = numerics.map(lambda d, name=name: d.get(name))
    energy = data.map(lambda d: d.get("energy") or {})
    out["energy_method"] = energy.map(lambda e: e.get("method"))
    out["energy_reason"] = energy.map(lambda e: e.get("reason") or "; ".join(e.get("invalid_reasons") or []) or None)
    phases = pd.DataFrame.from_records(data.map(lambda d: d.get("phases") or {}).tolist(), index=out.index)
    for name in phases.columns:
        out[PHASE_PREFIX + name] = phases[name]
    out["losses"] = data.map(loss_curve)
    verdicts = data.map(convergence_verdict)
    for name in ("verdict", "final_gap", "max_gap", "max_gap_step", "window"):
        out["conv_" + name] = verdicts.map(lambda v, name=name: v.get(name))
    out["shape_label"] = out["shape"].map(shape_label)
    out["device_label"] = out["device_name"].fillna(out["device"]).astype(str)
    out["commit"] = out["git_commit"].fillna("").str.slice(0, 7)
    out["intensity"] = pd.to_numeric(out["flops"], errors="coerce") / pd.to_numeric(out["bytes"], errors="coerce")
    for col in ("valid", "interpreted"):
        out[col] = out[col].fillna(col == "valid").astype(bool)
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


def convergence_verdict(record: dict[str, Any]) -> dict[str, Any]:
    """The stored verdict of a convergence record (``extra.convergence``), or an empty dict."""
    value = (record.get("extra") or {}).get("convergence")
    return value if isinstance(value, dict) else {}


def shape_label(shape: str) -> str:
    """``m=128,n=256,k=64`` as ``128x256x64``; any other shape string unchanged."""
    parts = dict(p.split("=", 1) for p in shape.split(",") if "=" in p) if isinstance(shape, str) else {}
    if set(parts) == {"m", "n", "k"}:
        return f"{parts['m']}x{parts['n']}x{parts['k']}"
    return str(shape)


def shape_dict(shape: str) -> dict[str, int]:
    """The store's shape text back as the record's dict (values are integers)."""
    return {k: int(v) for k, v in (p.split("=", 1) for p in shape.split(",") if "=" in p)}


def _flatten_runs(runs: pd.DataFrame) -> pd.DataFrame:
    data = runs["data"].map(lambda d: d if isinstance(d, dict) else {})
    out = runs.drop(columns=["data"]).copy()
    out["header"] = data  # the whole run header, small: one per run
    software = data.map(lambda d: d.get("software") or {})
    for key in ("torch", "python", "cuda_runtime", "triton", "transformer_engine", "torchao", "fp8bench"):
        out[key] = software.map(lambda s, key=key: s.get(key))
    out["os"] = data.map(lambda d: (d.get("host") or {}).get("os"))
    out["threads"] = data.map(lambda d: (d.get("device") or {}).get("threads"))
    out["energy_method"] = data.map(lambda d: d.get("energy_method"))
    out["budget_s"] = data.map(lambda d: (d.get("settings") or {}).get("budget_s"))
    out["suite"] = data.map(lambda d: (d.get("spec") or {}).get("suite"))
    out["n_records"] = data.map(lambda d: d.get("n_records"))
    out["commit"] = out["git_commit"].fillna("").str.slice(0, 7)
    return out


@st.cache_data(show_spinner="Reading the store...", max_entries=4)
def _load(target: str, fingerprint: tuple[int, int]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    store = _store(target)
    records = slim_records(store.records_frame(with_data=True))
    runs = _flatten_runs(store.runs_frame())
    return records, runs, store.gate_reports_frame().drop(columns=["data"])


def load_snapshot(target: str) -> Snapshot:
    """The store's current content; raises :class:`StoreProblem` with a readable message when it cannot."""
    store = _open(target)
    if store is None:
        empty = pd.DataFrame(columns=["run_id"])
        return Snapshot(target, empty, empty, empty)
    try:
        fingerprint = _fingerprint(store)
        records, runs, reports = _load(target, fingerprint)
    except (StoreError, sa.exc.SQLAlchemyError) as exc:
        raise StoreProblem(f"cannot read store {store.url}: {getattr(exc, 'orig', None) or exc}") from exc
    return Snapshot(target, records, runs, reports)


@st.cache_data(show_spinner="Reading run samples...", max_entries=16)
def load_run_payload(target: str, run_id: str) -> dict[str, Any]:
    """A stored run with every record and its raw samples (for the Compare page)."""
    store = _open(target)
    if store is None:
        raise StoreProblem(f"no store at {target}")
    try:
        return store.run_payload(run_id)
    except (StoreError, sa.exc.SQLAlchemyError) as exc:
        raise StoreProblem(str(exc)) from exc


def clear_caches() -> None:
    _load.clear()
    load_run_payload.clear()
