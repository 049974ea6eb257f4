"""The shared selection rules (fp8bench.analysis.selection): their SQL, frame and dict forms pick the same records from
one generated store (every status, valid and invalid, power-capped, several runs per case, several backends, float,
FP8 and 4-bit precisions). Collected again against a real PostgreSQL by tests/test_store_postgres.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fp8bench.analysis.selection import (
    LATEST_CLASSES,
    fastest_cells,
    is_scaled,
    is_speed_comparable,
    latest_per_case,
    speed_comparable_frame,
    speed_comparable_sql,
)
from fp8bench.core.records import load_record
from fp8bench.results.export import store_runs
from fp8bench.results.store import open_store
from fp8bench.results.store.queries import RecordFilter, latest_records, record_json, select_records
from tests.gate_fixtures import payload, record

PRECISIONS = ("fp32", "bf16", "fp8_rowwise", "mxfp8", "nvfp4", "mxfp4")
BACKENDS = ("torch", "emulated", "triton")
POWER_CAP = "throttled: power cap (sw_power_cap) during the energy window"
THERMAL = "throttled: thermal (hw_thermal_slowdown) during the energy window"


def _variant(rec: dict[str, Any], kind: str) -> dict[str, Any]:
    """``rec`` turned into one of the outcomes a store holds."""
    if kind == "failed":
        return {**rec, "status": "failed", "reason": "RuntimeError: boom", "median_s": None, "samples_s": []}
    if kind == "skipped":
        return {**rec, "status": "skipped", "reason": "no kernel", "median_s": None, "samples_s": []}
    if kind == "interpreted":
        return {**rec, "interpreted": True, "median_s": None, "samples_s": [], "reason": "interpreted: not timed"}
    if kind in ("capped", "thermal"):  # as an older fp8bench marked a window it saw throttled
        why = POWER_CAP if kind == "capped" else THERMAL
        return {**rec, "status": "invalid", "valid": False, "reason": why, "energy": {"invalid_reasons": [why]}}
    if kind == "nonfinite":
        return {**rec, "status": "invalid", "valid": False, "reason": "non-finite output: 1% of elements NaN/Inf"}
    return rec


KINDS = ("ok", "ok", "ok", "failed", "skipped", "interpreted", "capped", "thermal", "nonfinite")


@pytest.fixture
def store_url(tmp_path):
    return str(tmp_path / "store")


@pytest.fixture
def mixed_store(store_url):
    """Six runs (the fifth with --strict-clocks) of 2 shapes x 6 precisions x 3 backends; each record's outcome
    drawn from :data:`KINDS`, so every case has a history of mixed outcomes."""
    store = open_store(store_url)
    rng = np.random.default_rng(19)
    for i in range(6):
        recs = []
        for m in (64, 128):
            for precision in PRECISIONS:
                for backend in BACKENDS:
                    samples = list(1e-3 * m / 64 * np.exp(rng.normal(0, 0.2, 3)))
                    rec = _variant(record(m, precision, samples, backend=backend), str(rng.choice(KINDS)))
                    recs.append(rec)
        run = payload(f"run{i}", recs, commit=f"c{i}", started_at=f"2026-11-{10 + i}T00:00:00+00:00")
        run["run"]["settings"]["strict_clocks"] = i == 4
        store.ingest_run(run)
    return store


def _all(store: Any) -> Any:
    return select_records(store, RecordFilter())


def _json_rule(store: Any, ids: list[int]) -> set[int]:
    """The ids of the records the dict rule keeps, read from the record JSON and the run headers."""
    runs = store_runs(store)
    frame = _all(store).set_index("id")
    return {i for i, rec in record_json(store, ids).items()
            if is_speed_comparable(load_record(rec), runs[str(frame.at[i, "run_id"])])}


def test_speed_comparable_sql_frame_and_dict_forms_agree(mixed_store):
    every = _all(mixed_store)
    assert set(every["status"]) == {"ok", "failed", "skipped", "invalid"} and every["interpreted"].any()
    by_sql = set(select_records(mixed_store, RecordFilter(), where=[speed_comparable_sql()])["id"])
    by_frame = set(speed_comparable_frame(every)["id"])
    assert by_sql == by_frame and 0 < len(by_sql) < len(every)
    assert set(every.loc[every["id"].isin(by_sql), "status"]) == {"ok"}
    by_dict = _json_rule(mixed_store, every["id"].tolist())
    # The one difference, and the only one: a record an older fp8bench invalidated for power capping alone counts
    # in the dict form (the record JSON says why, the run header whether --strict-clocks was asked), and the typed
    # columns cannot tell it from a thermal one.
    capped = every[(every["reason"] == POWER_CAP) & ~every["interpreted"].astype(bool)]
    relaxed = set(capped.loc[capped["run_id"] != "run4", "id"])
    assert relaxed and set(capped.loc[capped["run_id"] == "run4", "id"])  # both kinds are in the store
    assert by_dict == by_sql | relaxed


def test_latest_per_case_sql_and_frame_agree(mixed_store):
    every = _all(mixed_store)  # run order, oldest first
    for name, rows in (("any", every), ("speed", speed_comparable_frame(every))):
        latest = latest_records(mixed_store, {name: LATEST_CLASSES[name]}, with_phases=False)
        assert set(latest["id"]) == set(latest_per_case(rows)["id"]), name
    every_latest = latest_records(mixed_store, LATEST_CLASSES, with_phases=False)
    assert not every_latest.duplicated("id").any()


def test_fastest_cells_take_the_fastest_non_reference_backend(mixed_store):
    latest = latest_per_case(speed_comparable_frame(_all(mixed_store)))
    cells = fastest_cells(latest)
    assert "emulated" not in set(cells["backend"]) and not cells.duplicated(
        ["device_label", "workload", "shape", "precision"]).any()
    for cell in cells.itertuples():
        rivals = latest[(latest["shape"] == cell.shape) & (latest["precision"] == cell.precision)
                        & (latest["backend"] != "emulated")]
        assert cell.median_s == rivals["median_s"].min()
    # Every cell with a non-reference record is there.
    assert len(cells) == len(latest[latest["backend"] != "emulated"].drop_duplicates(["shape", "precision"]))


def test_scaled_precisions_include_the_4_bit_recipes():
    """A substring test on "fp8" (the Overview page's old rule) dropped nvfp4 and mxfp4."""
    assert [p for p in PRECISIONS if is_scaled(p)] == ["fp8_rowwise", "mxfp8", "nvfp4", "mxfp4"]
