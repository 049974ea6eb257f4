"""The store's tables as this fp8bench writes them (schema :data:`STORE_SCHEMA_VERSION`): runs, records with a typed
column for every field a reader filters or sorts on, each record's whole JSON apart, its phases, and gate reports.

How older schemas become this one is :mod:`fp8bench.results.store.migrations`.
"""

from __future__ import annotations

import sqlalchemy as sa

from fp8bench.results.store.columns import RECORD_COLUMNS

STORE_SCHEMA_VERSION = 7


metadata = sa.MetaData()


meta_table = sa.Table("meta", metadata, sa.Column("key", sa.String(64), primary_key=True),
                      sa.Column("value", sa.Text, nullable=False))


runs_table = sa.Table(
    "runs", metadata,
    sa.Column("run_id", sa.String(64), primary_key=True),
    sa.Column("started_at", sa.String(40)),
    sa.Column("finished_at", sa.String(40)),
    sa.Column("status", sa.String(20)),
    sa.Column("git_commit", sa.String(64)),
    sa.Column("git_dirty", sa.Boolean),
    sa.Column("host", sa.String(128)),
    sa.Column("device", sa.String(32)),
    sa.Column("device_name", sa.String(128)),
    sa.Column("source", sa.String(32)),  # fp8bench | pytest-benchmark
    sa.Column("schema_version", sa.Integer),
    sa.Column("data", sa.JSON),
    sa.Column("git_branch", sa.String(200), index=True),  # schema 3
    sa.Column("commit_depth", sa.Integer),  # schema 3: first-parent depth of git_commit
    sa.Column("commit_time", sa.String(40)),  # schema 3
)


records_table = sa.Table(
    "records", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.run_id"), nullable=False, index=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("case_key", sa.String(400), index=True),
    sa.Column("workload", sa.String(40)),
    sa.Column("shape", sa.String(200)),
    sa.Column("precision", sa.String(40)),
    sa.Column("fp8_format", sa.String(10)),
    sa.Column("backend", sa.String(40)),
    sa.Column("device", sa.String(32)),
    sa.Column("device_name", sa.String(128)),
    sa.Column("status", sa.String(10)),
    sa.Column("reason", sa.Text),
    sa.Column("median_s", sa.Float),
    sa.Column("prequant_median_s", sa.Float),
    sa.Column("tflops", sa.Float),
    sa.Column("prequant_tflops", sa.Float),
    sa.Column("pct_of_peak", sa.Float),
    sa.Column("energy_j", sa.Float),
    sa.Column("tflops_per_w", sa.Float),
    sa.Column("sqnr_db", sa.Float),
    sa.Column("rel_err", sa.Float),
    sa.Column("valid", sa.Boolean),
    sa.Column("interpreted", sa.Boolean),
    sa.Column("comparability_key", sa.String(32), index=True),  # schema 2
    *[sa.Column(c.name, c.type) for c in RECORD_COLUMNS],  # schema 3 (profile_trace: schema 4)
    sa.UniqueConstraint("run_id", "seq", name="uq_records_run_seq"),
)


# Schema 3 indexes: a case's history in time order, covering what the latest-record-per-case query reads (so that
# query scans the index, not the table: fp8bench.results.store.queries.latest_records), the run-range filter, and the
# sidebar's list filters.
RECORD_INDEXES = {
    "ix_records_case_history": ("case_key", "device_name", "device", "run_started_at", "seq", "status", "valid",
                                "interpreted", "median_s", "energy_j", "sqnr_db", "rel_err", "has_losses",
                                "workload", "backend", "precision", "git_branch"),
    "ix_records_run_started_at": ("run_started_at",),
    "ix_records_git_branch": ("git_branch",),
    "ix_records_workload_precision": ("workload", "precision"),
    # Schema 7: the sidebar's filter choices (device label, workload, backend, precision, branch, with counts),
    # grouped from this index alone instead of a scan of the table (fp8bench.results.store.queries.filter_options):
    # 1.45 s of CPU at a million records before it.
    "ix_records_filter_options": ("device_name", "device", "timing_mode", "workload", "backend", "precision",
                                  "git_branch"),
}


for _name, _cols in RECORD_INDEXES.items():
    sa.Index(_name, *[records_table.c[c] for c in _cols])


# Schema 3: the whole record as JSON (raw samples, telemetry, loss curves), read per run or per record on demand.
# Schemas 1 and 2 kept it in ``records.data``, where every scan of the records had to step over it.
record_data_table = sa.Table(
    "record_data", metadata,
    sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id"), primary_key=True),
    sa.Column("data", sa.JSON, nullable=False),
)


# The records table as schemas 1 and 2 had it, for the migrations that read its JSON column.
legacy_records = sa.table("records", sa.column("id", sa.Integer), sa.column("run_id", sa.String),
                          sa.column("data", sa.JSON), sa.column("comparability_key", sa.String))


record_phases_table = sa.Table(
    "record_phases", metadata,  # schema 3: one row per record and timed phase
    sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id"), primary_key=True),
    sa.Column("phase", sa.String(64), primary_key=True),
    sa.Column("median_s", sa.Float),  # the phase's median time per call, seconds
)


gate_reports_table = sa.Table(
    "gate_reports", metadata,
    sa.Column("report_id", sa.String(64), primary_key=True),
    sa.Column("created_at", sa.String(40)),
    sa.Column("base_run_id", sa.String(64), index=True),
    sa.Column("cand_run_id", sa.String(64), index=True),
    sa.Column("git_commit", sa.String(64)),  # the candidate's commit
    sa.Column("verdict", sa.String(20)),  # pass | regression | inconclusive | error
    sa.Column("exit_code", sa.Integer),
    sa.Column("data", sa.JSON),  # the whole report: per-case verdicts, ratios, intervals
)
