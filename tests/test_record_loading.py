"""Stored records through the one loader (``fp8bench.core.records.load_record``): real run files of both schemas and
a store written before its schema 3 read into typed parts and write back the JSON they were read from, byte for
byte; keys a record was written without read as ``None``; a newer schema is refused by name."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from old_data import DATA, RUN_FILES, schema2_rows

from fp8bench.core.record_parts import (
    EnergyResult,
    HarnessCost,
    Numerics,
    OutputCheck,
    PhaseStat,
    SampleFigures,
    TimingInfo,
)
from fp8bench.core.records import SCHEMA_VERSION, Record, case_key, load_record
from fp8bench.results.runfile import read_run_file


def _store_rows() -> list[str]:
    """The record JSON of every row of the schema-2 store."""
    return [text for (text,) in schema2_rows("SELECT data FROM records ORDER BY id")]


@pytest.mark.parametrize("path", RUN_FILES, ids=lambda p: p.name)
def test_every_record_of_a_run_file_writes_back_the_json_it_was_read_from(path: Path) -> None:
    data = read_run_file(path)
    assert data["records"]
    for stored in data["records"]:
        record = load_record(stored, data["schema_version"])
        assert json.dumps(record.to_dict()) == json.dumps(stored)  # same keys, order and values
        assert isinstance(record.timing, TimingInfo) and isinstance(record.energy, EnergyResult)


def test_every_record_of_an_old_store_writes_back_the_bytes_it_was_stored_as() -> None:
    rows = _store_rows()
    assert len(rows) == 26
    for text in rows:
        record = load_record(json.loads(text), SCHEMA_VERSION)
        assert json.dumps(record.to_dict()) == text
    # Written before accumulation, output checks and harness costs were recorded: those read as absent.
    first = load_record(json.loads(rows[0]))
    assert "accumulation" not in json.loads(rows[0]) and first.accumulation is None
    assert first.output_check == OutputCheck() and not first.output_check and first.harness.share is None


def test_the_typed_parts_hold_what_the_stored_objects_hold() -> None:
    data = read_run_file(DATA / "runfiles" / "schema2-complete.json")
    stored = next(r for r in data["records"] if r["status"] == "ok" and r["precision"] == "fp8_rowwise")
    record = load_record(stored, 2)
    assert record.numerics.sqnr_db == stored["numerics"]["sqnr_db"] is not None
    assert record.timing.e2e_stopped_by == stored["timing"]["e2e_stopped_by"]
    assert record.energy.reason == stored["energy"]["reason"]
    assert "harness" not in stored and record.harness.share is None  # written before harness costs were recorded
    assert "harness" not in record.to_dict()
    assert record.case_key == case_key(stored)


def test_a_schema_newer_than_this_fp8bench_reads_is_refused_by_name() -> None:
    stored = read_run_file(DATA / "runfiles" / "schema1-complete.json")["records"][0]
    assert load_record(stored, 1) == load_record(stored, 2)
    with pytest.raises(ValueError, match=r"record of schema version 3, newer than this fp8bench reads \(1 to 2\)"):
        load_record(stored, 3)
    with pytest.raises(ValueError, match=r"record schema version '2'; accepted: an integer from 1 to 2"):
        load_record(stored, "2")  # type: ignore[arg-type]


def test_a_part_keeps_the_stored_order_nulls_and_keys_it_does_not_name() -> None:
    stored = {"sqnr_db": None, "plugin_score": 3, "rel_err": 0.5}
    part = Numerics.from_json(stored)
    assert (part.sqnr_db, part.rel_err, part.max_abs_err) == (None, 0.5, None)
    assert json.dumps(part.to_json()) == json.dumps(stored)
    # A value set since is added after the stored keys; a stored null stays null until something is set.
    assert list(replace(part, max_abs_err=1.0).to_json() or {}) == ["sqnr_db", "plugin_score", "rel_err",
                                                                   "max_abs_err"]
    assert Numerics.from_json(None).to_json() is None and Numerics.from_json(None) == Numerics()
    with pytest.raises(ValueError, match=r"record field 'numerics' is list '\[1, 2\]'; accepted: an object"):
        Numerics.from_json([1, 2])  # type: ignore[arg-type]


def test_a_record_built_from_json_objects_holds_typed_parts_and_writes_them_back() -> None:
    record = Record("gemm", {"m": 8, "n": 8, "k": 8}, "bf16", "torch", "cpu", "ok",
                    numerics={"sqnr_db": 40.0, "rel_err": 0.01}, harness={"wall_s": 2.0, "share": 0.5},
                    samples=SampleFigures(phase_stats={"gemm": {"median_s": 1e-3, "n": 5}}))  # type: ignore[dict-item]
    assert isinstance(record.numerics, Numerics) and record.numerics.sqnr_db == 40.0
    assert isinstance(record.harness, HarnessCost) and record.harness.share == 0.5
    assert record.samples.phase_stats == {"gemm": PhaseStat(median_s=1e-3, n=5)}
    out = record.to_dict()
    assert out["numerics"] == {"sqnr_db": 40.0, "rel_err": 0.01} and out["energy"] == {}
    assert out["phase_stats"] == {"gemm": {"median_s": 1e-3, "n": 5}}
    assert Record.from_dict(out) == record
    # A field set on a loaded record is written after the stored ones; the rest stay as stored.
    loaded = load_record({k: v for k, v in out.items() if k != "timing_mode"})
    assert "timing_mode" not in loaded.to_dict()
    assert list(replace(loaded, timing_mode="cpu").to_dict())[-1] == "timing_mode"


def test_a_part_key_of_the_wrong_type_is_refused_where_the_record_enters() -> None:
    """Each typed part's annotations say what its keys hold, and the entry check reads them: a text where a number
    of seconds or joules belongs is named there, not met later by a reader formatting the typed value."""
    from fp8bench.results.record_check import record_problems

    stored = read_run_file(DATA / "runfiles" / "schema2-complete.json")["records"][1]
    bad = {**stored, "timing": {**stored["timing"], "timed_s": "fast"}, "energy": {"joules_per_iter": "12 J"},
           "harness": {"split_s": [1, 2]}}
    fields = {p.field for p in record_problems(bad)}
    assert fields == {"timing.timed_s", "energy.joules_per_iter", "harness.split_s"}, fields
    assert record_problems(stored) == []
