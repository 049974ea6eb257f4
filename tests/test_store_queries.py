"""The store's read-side queries agree with the same selection done in pandas on every record."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fp8bench.analysis.selection import LATEST_CLASSES
from fp8bench.results.store import open_store
from fp8bench.results.store.queries import (
    RecordFilter,
    count_records_by,
    filter_options,
    latest_records,
    select_records,
    store_fingerprint,
)
from tests.gate_fixtures import payload, record


@pytest.fixture
def store_url(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def store(store_url):
    """Six runs on two branches; the newest run's fp8 records are invalid. Also run on PostgreSQL."""
    s = open_store(store_url)
    rng = np.random.default_rng(0)
    for i in range(6):
        recs = []
        for m in (64, 128):
            for precision in ("bf16", "fp8_rowwise"):
                rec = record(m, precision, list(1e-3 * np.exp(rng.normal(0, 0.1, 3))))
                if i == 5 and precision == "fp8_rowwise":
                    rec = {**rec, "status": "invalid", "valid": False}  # the newest fp8 run is not comparable
                if precision == "bf16":
                    rec["phases"] = {"gemm": rec["median_s"] * 0.9}
                recs.append(rec)
        p = payload(f"run{i}", recs, commit=f"c{i}", started_at=f"2026-11-{10 + i}T00:00:00+00:00")
        p["run"]["git"]["branch"] = "main" if i % 2 == 0 else "dev"
        s.ingest_run(p)
    return s


def test_latest_per_class_matches_pandas(store):
    every = store.records_frame().sort_values(["started_at", "seq"])
    latest = latest_records(store, {n: LATEST_CLASSES[n] for n in ("any", "speed")})
    any_ = every.drop_duplicates(["case_key"], keep="last")
    ok = every[(every["status"] == "ok") & every["valid"]].drop_duplicates(["case_key"], keep="last")
    assert set(latest["id"]) == set(any_["id"]) | set(ok["id"])
    assert len(latest) == 6  # 4 cases, the 2 fp8 ones also by their latest valid record
    bf16 = latest[latest["precision"] == "bf16"]
    assert (bf16["phase:gemm"] == bf16["median_s"] * 0.9).all() and latest["device_label"].eq("Test CPU").all()
    assert set(every.columns) - {"started_at", "host"} <= set(latest.columns)  # every typed column, as stored
    assert list(latest["run_started_at"]) == sorted(latest["run_started_at"])


def test_filters_counts_and_options(store):
    flt = RecordFilter(precision=("bf16",), branch=("main",), started_from="2026-11-12T00:00:00+00:00")
    rows = select_records(store, flt, columns=("run_id", "precision", "git_branch"))
    assert set(rows["run_id"]) == {"run2", "run4"} and set(rows["precision"]) == {"bf16"}
    counts = count_records_by(store, RecordFilter(), "git_branch", "status")
    assert counts.set_index(["git_branch", "status"])["records"].to_dict() == {
        ("dev", "invalid"): 2, ("dev", "ok"): 10, ("main", "ok"): 12}
    options = filter_options(store)
    assert set(options["git_branch"]) == {"main", "dev"} and options["records"].sum() == 24


def test_fingerprint_moves_with_every_new_run(store):
    before = store_fingerprint(store)
    store.ingest_run(payload("run-new", [record(64, "bf16", [1e-3])], started_at="2026-12-01T00:00:00+00:00"))
    after = store_fingerprint(store)
    assert after[0] > before[0] and after[1] == before[1] + 1
    assert isinstance(latest_records(store, LATEST_CLASSES, RecordFilter(workload=("none",))), pd.DataFrame)
