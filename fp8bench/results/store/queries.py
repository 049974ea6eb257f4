"""Reading a large store without reading all of it: filters, latest records, counts and histories, in SQL.

A year of nightly runs on several runners is about a million records. Fetching them all to draw a page costs
seconds of row conversion before any chart is drawn, and most pages show one record per case anyway: the latest
one on each device model. So the dashboard, ``payoff`` and ``changes`` ask the database narrow questions:

* :func:`filter_options`: the distinct values the sidebar offers, one ``GROUP BY``;
* :func:`latest_records`: the latest record of each case on each device model, overall and among the records a
  page may use (speed-comparable, energy-metered, with numerics, with a loss curve: the conditions of
  :data:`fp8bench.analysis.selection.LATEST_CLASSES`), with their phase times;
* :func:`count_records_by`: counts per group (energy coverage, case outcomes per run);
* :func:`select_records`: the records of some cases, or of some status, in time order (history, change points).

Every query reads typed columns only (store schema 3, :mod:`fp8bench.results.store.columns`), never the record JSON, and
takes a :class:`RecordFilter`, the dashboard's sidebar as SQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import sqlalchemy as sa

from fp8bench.core.records import SEPARATE_TIMING_MODES
from fp8bench.results.store.database import Store
from fp8bench.results.store.rows import as_dict
from fp8bench.results.store.tables import (
    gate_reports_table,
    record_data_table,
    record_phases_table,
    records_table,
    runs_table,
)

R = records_table.c
# Appended to the device label of records timed as CUDA-graph replays (and " · blocked stream" to blocked-stream
# ones, records.SEPARATE_TIMING_MODES): every page groups and compares by device
# label, so graph figures (no launch gaps, fp8bench.measure.timing) are never set against eager ones of the same GPU.
GRAPH_LABEL = f" · {SEPARATE_TIMING_MODES['cuda_graph']}"
# The device as people name it: the model (``NVIDIA H100 80GB HBM3``, the CPU's brand) or, failing that, the kind;
# with GRAPH_LABEL for CUDA-graph records. :func:`device_labels` is the same rule on a frame.
DEVICE_LABEL = sa.func.coalesce(R.device_name, R.device, type_=sa.String).concat(
    sa.case(*((R.timing_mode == mode, f" · {name}") for mode, name in SEPARATE_TIMING_MODES.items()),
            else_="")).label("device_label")
# Every typed column (the record JSON lives in record_data).
SLIM_COLUMNS = list(records_table.columns)
MEASURED = ("ok", "invalid")
PHASE_PREFIX = "phase:"
_IN_CHUNK = 5000  # ids per IN (...) list: well under SQLite's bound-parameter limit


@dataclass(frozen=True)
class RecordFilter:
    """Which records to read; an empty tuple means "no restriction". Run bounds are run start times (ISO 8601)."""

    device: tuple[str, ...] = ()  # device labels (see DEVICE_LABEL)
    workload: tuple[str, ...] = ()
    backend: tuple[str, ...] = ()
    precision: tuple[str, ...] = ()
    branch: tuple[str, ...] = ()
    started_from: str | None = None
    started_to: str | None = None

    def conditions(self) -> list[sa.ColumnElement[bool]]:
        out: list[sa.ColumnElement[bool]] = []
        for values, column in ((self.device, DEVICE_LABEL), (self.workload, R.workload),
                               (self.backend, R.backend), (self.precision, R.precision),
                               (self.branch, R.git_branch)):
            if values:
                out.append(column.in_(list(values)))
        if self.started_from is not None:
            out.append(R.run_started_at >= self.started_from)
        if self.started_to is not None:
            out.append(R.run_started_at <= self.started_to)
        return out


def device_labels(frame: pd.DataFrame) -> pd.Series:
    """:data:`DEVICE_LABEL` of each row of a frame with ``device_name``, ``device`` and (if read) ``timing_mode``."""
    labels = frame["device_name"].where(frame["device_name"].notna(), frame["device"]).astype(str)
    if "timing_mode" in frame:
        for mode, name in SEPARATE_TIMING_MODES.items():
            labels = labels.where(frame["timing_mode"] != mode, labels + f" · {name}")
    return labels


def _frame(store: Store, stmt: sa.Select[Any]) -> pd.DataFrame:
    with store.engine.connect() as conn:
        result = conn.execute(stmt)
        names = list(result.keys())
        rows = result.fetchall()
    # Column-wise construction: pandas builds a frame from one list per column several times faster than from
    # a list of row objects.
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(names)
    return pd.DataFrame(dict(zip(names, map(list, columns), strict=True)), columns=names)


def filter_options(store: Store) -> pd.DataFrame:
    """Distinct (device label, workload, backend, precision, branch) with their record counts.

    Grouped by the stored columns in the order of ``ix_records_filter_options``, so the database walks that index
    in order and needs no sort; the label (an expression) is made from the few hundred groups here and the counts
    of groups with one label added up. Grouping by the label in SQL sorted every record: 0.85 s against 0.12 s at
    a million records on SQLite."""
    stored = [R.device_name, R.device, R.timing_mode, R.workload, R.backend, R.precision, R.git_branch]
    groups = _frame(store, sa.select(*stored, sa.func.count().label("records")).group_by(*stored))
    keys = ["device_label", "workload", "backend", "precision", "git_branch"]
    if groups.empty:
        return pd.DataFrame(columns=[*keys, "records"])
    groups["device_label"] = device_labels(groups)
    # dropna=False: a record with no branch (or workload) is a choice too, as a NULL is its own group in SQL.
    return groups.groupby(keys, dropna=False, sort=True, as_index=False)["records"].sum()


def latest_records(store: Store, classes: Mapping[str, sa.ColumnElement[bool]], flt: RecordFilter = RecordFilter(),
                   with_phases: bool = True) -> pd.DataFrame:
    """The latest record (by run start, then position in the run) of each case on each device label, for each
    subset in ``classes`` (name -> condition: :data:`fp8bench.analysis.selection.LATEST_CLASSES`), without
    duplicates, oldest first; phase medians as
    ``phase:NAME`` columns. At most (cases x devices x classes) rows, however long the history.

    Three reads, none of which sorts the history: one ``GROUP BY`` pass finds, per case and device, the start of
    the latest run in each subset (``MAX(CASE WHEN subset THEN run_started_at END)``); then the keys of the records
    of those runs are fetched, each flagged with the subsets it belongs to, and the picks are made here; then the
    picked records' columns. A run holds every case it measured, so the runs read can hold many times the records
    picked (a case whose latest record is invalid takes its speed-comparable one from an older run): their keys
    only, not their dozens of columns."""
    names = list(classes)
    empty = pd.DataFrame(columns=[c.name for c in SLIM_COLUMNS] + ["device_label"])
    if not names:
        return empty
    latest = [sa.func.max(sa.case((classes[n], R.run_started_at))).label(f"t_{n}") for n in names]
    # Grouped by the stored columns, not the label, and reading only columns of the covering index
    # (ix_records_case_history), so the scan never visits the table: a lookup per record for ``timing_mode`` made
    # this pass 4x slower at a million records. A case key names its CUDA-graph mode
    # (fp8bench.core.records.case_key), so the device without the mode (``device_base``) groups the same way, and
    # the label's mode suffix is read from the few rows fetched below.
    groups = _frame(store, sa.select(R.case_key, R.device_name, R.device, *latest).where(*flt.conditions())
                    .group_by(R.case_key, R.device_name, R.device))
    keys = ["case_key", "device_base"]
    if not groups.empty:
        groups["device_base"] = device_labels(groups)
        if groups.duplicated(keys).any():  # a model name equal to another row's kind
            groups = groups.groupby(keys, as_index=False)[[f"t_{n}" for n in names]].max()
    starts = sorted({str(t) for n in names for t in groups[f"t_{n}"].dropna()}) if not groups.empty else []
    if not starts:
        return empty
    flags = [sa.case((classes[n], sa.true()), else_=sa.false()).label(f"in_{n}") for n in names]
    parts = [_frame(store, sa.select(*_PICK_COLUMNS, DEVICE_LABEL, *flags)
                    .where(R.run_started_at.in_(starts[i:i + _IN_CHUNK]), *flt.conditions()))
             for i in range(0, len(starts), _IN_CHUNK)]
    rows = pd.concat(parts, ignore_index=True)
    rows["device_base"] = device_labels(rows[["device_name", "device"]])
    rows = rows.merge(groups[[*keys, *(f"t_{n}" for n in names)]], on=keys)
    picks = []
    for n in names:
        chosen = rows[rows[f"in_{n}"].astype(bool) & (rows["run_started_at"] == rows[f"t_{n}"])]
        picks.append(chosen.sort_values("seq").drop_duplicates(["case_key", "device_label"], keep="last"))
    picked = pd.concat(picks, ignore_index=True).drop_duplicates("id")
    ids = picked.sort_values(["run_started_at", "seq"], kind="stable")["id"].tolist()
    frame = records_by_id(store, ids)
    return with_phase_columns(store, frame) if with_phases else frame


# What latest_records reads of the records of the runs it considers, to pick from them.
_PICK_COLUMNS = [R.id, R.case_key, R.device_name, R.device, R.run_started_at, R.seq]


def records_by_id(store: Store, record_ids: Sequence[int]) -> pd.DataFrame:
    """The typed columns and ``device_label`` of the given records, in the order given."""
    ids = [int(i) for i in record_ids]
    parts = [_frame(store, sa.select(*SLIM_COLUMNS, DEVICE_LABEL).where(R.id.in_(ids[i:i + _IN_CHUNK])))
             for i in range(0, len(ids), _IN_CHUNK)]
    if not parts:
        return pd.DataFrame(columns=[c.name for c in SLIM_COLUMNS] + ["device_label"])
    rows = pd.concat(parts, ignore_index=True)
    return rows.set_index("id", drop=False).loc[ids].reset_index(drop=True)


def phase_medians(store: Store, record_ids: Sequence[int]) -> pd.DataFrame:
    """``record_id x phase`` medians (seconds) of the given records, one column per phase name."""
    parts = []
    ids = [int(i) for i in record_ids]
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = ids[start:start + _IN_CHUNK]
        stmt = sa.select(record_phases_table).where(record_phases_table.c.record_id.in_(chunk))
        parts.append(_frame(store, stmt))
    rows = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if rows.empty:
        return pd.DataFrame(index=pd.Index([], name="record_id"))
    return rows.pivot(index="record_id", columns="phase", values="median_s")


def with_phase_columns(store: Store, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (with an ``id`` column) plus one ``phase:NAME`` column per phase any of its records has."""
    phases = phase_medians(store, frame["id"].tolist())
    if phases.empty:
        return frame
    phases.columns = [PHASE_PREFIX + str(c) for c in phases.columns]
    return frame.join(phases, on="id")


# Group keys that are expressions rather than stored columns.
GROUP_EXPRESSIONS: dict[str, sa.ColumnElement[Any]] = {
    "device_label": DEVICE_LABEL,
    "energy_measured": sa.case((R.energy_j.is_not(None), sa.true()), else_=sa.false()).label("energy_measured"),
    "valid": sa.func.coalesce(R.valid, sa.true()).label("valid"),
}


def count_records_by(store: Store, flt: RecordFilter, *groups: str,
                     where: Sequence[sa.ColumnElement[bool]] = ()) -> pd.DataFrame:
    """Record counts (column ``records``) per combination of the named columns or :data:`GROUP_EXPRESSIONS`."""
    columns = [GROUP_EXPRESSIONS[g] if g in GROUP_EXPRESSIONS else R[g] for g in groups]
    stmt = (sa.select(*columns, sa.func.count().label("records")).where(*flt.conditions(), *where)
            .group_by(*columns).order_by(*columns))
    return _frame(store, stmt)


def select_records(store: Store, flt: RecordFilter, columns: Sequence[str] | None = None,
                   where: Sequence[sa.ColumnElement[bool]] = (), limit: int | None = None,
                   newest_first: bool = False) -> pd.DataFrame:
    """Records matching the filter and ``where``, in run order (oldest first unless ``newest_first``), typed
    columns only (``columns`` to narrow them; ``device_label`` is always added)."""
    cols = SLIM_COLUMNS if columns is None else [R[c] for c in columns]
    order = (R.run_started_at, R.seq)
    stmt = (sa.select(*cols, DEVICE_LABEL).where(*flt.conditions(), *where)
            .order_by(*[o.desc() for o in order] if newest_first else order))
    if limit is not None:
        stmt = stmt.limit(limit)
    return _frame(store, stmt)


def store_fingerprint(store: Store) -> tuple[int, int, int]:
    """Numbers that change whenever a record, run or gate report is added: the highest record id and the run and
    report counts (index lookups, not a scan of the records)."""

    stmt = sa.select(sa.select(sa.func.max(R.id)).scalar_subquery(),
                     sa.select(sa.func.count()).select_from(runs_table).scalar_subquery(),
                     sa.select(sa.func.count()).select_from(gate_reports_table).scalar_subquery())
    with store.engine.connect() as conn:
        top, runs, reports = conn.execute(stmt).one()
    return int(top or 0), int(runs), int(reports)


def record_json(store: Store, record_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """The full record JSON of a few records (a loss curve, the raw samples), by id."""

    out: dict[int, dict[str, Any]] = {}
    ids = [int(i) for i in record_ids]
    with store.engine.connect() as conn:
        for start in range(0, len(ids), _IN_CHUNK):
            rows = conn.execute(sa.select(record_data_table.c.record_id, record_data_table.c.data)
                                .where(record_data_table.c.record_id.in_(ids[start:start + _IN_CHUNK]))).all()
            out.update({int(i): as_dict(d) for i, d in rows})
    return out
