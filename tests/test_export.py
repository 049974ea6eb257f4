"""`fp8bench export`: CSV, Parquet, github-action-benchmark and Bencher Metric Format, from files or a store,
with the dashboard's filters."""

from __future__ import annotations

import io
import json

import jsonschema
import pandas as pd
import pytest

from fp8bench.cli import main
from fp8bench.render.export import COLUMNS, bencher_metric_format, github_action_benchmark
from fp8bench.results.export import Row
from fp8bench.results.runfile import atomic_write_json
from tests.gate_fixtures import payload, record

# Bencher Metric Format, https://bencher.dev/bmf.json (draft-07): benchmark -> measure -> {value, lower_value,
# upper_value}, value required.
BMF_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema", "type": "object",
    "patternProperties": {".+": {"type": "object", "patternProperties": {".+": {
        "type": "object", "required": ["value"],
        "properties": {"value": {"type": "number"}, "lower_value": {"type": "number"},
                       "upper_value": {"type": "number"}}}}}},
}
# github-action-benchmark customSmallerIsBetter: src/extract.ts, interface BenchmarkResult.
GAB_SCHEMA = {
    "type": "array", "minItems": 1,
    "items": {"type": "object", "required": ["name", "unit", "value"], "additionalProperties": False,
              "properties": {"name": {"type": "string"}, "unit": {"type": "string"}, "value": {"type": "number"},
                             "range": {"type": "string"}, "extra": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two real CPU runs in one results folder (store and run files)."""
    results = tmp_path_factory.mktemp("export") / "results"
    ids: list[str] = []
    for _ in range(2):
        out = io.StringIO()
        code = main(["run", "--shape", "32x32x32", "--precision", "bf16", "fp8_rowwise", "mxfp8", "--backend",
                     "torch", "emulated", "--budget", "10", "--no-phases", "--no-energy", "--results-dir",
                     str(results), "--json"])
        assert code == 0, out.getvalue()
        # The run just written: ids of one second differ only in a random suffix, so never the last in sort order.
        [new] = {p.stem for p in (results / "runs").glob("*.json")} - set(ids)
        ids.append(new)
    return results, ids


def _export(capsys, *argv):
    code = main(["export", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_csv_from_the_store_has_every_record_and_every_status(two_runs, capsys):
    results, ids = two_runs
    capsys.readouterr()
    code, out, err = _export(capsys, "--format", "csv", "--results-dir", str(results))
    assert code == 0, err
    frame = pd.read_csv(io.StringIO(out))
    assert list(frame.columns[:len(COLUMNS)]) == list(COLUMNS)
    assert len(frame) == 12 and set(frame["run_id"]) == set(ids)
    assert set(frame["status"]) == {"ok", "skipped"}  # mxfp8 on the CPU torch backend is refused, and exported
    ok = frame[frame["status"] == "ok"]
    assert ok["median_s"].gt(0).all() and ok["sqnr_db"].gt(15).all()


def test_csv_from_run_files_equals_the_store_export(two_runs, capsys):
    results, _ = two_runs
    _, from_store, _ = _export(capsys, "--format", "csv", "--results-dir", str(results))
    files = sorted(str(p) for p in (results / "runs").glob("*.json"))
    _, from_files, _ = _export(capsys, *files, "--format", "csv")
    assert pd.read_csv(io.StringIO(from_store)).equals(pd.read_csv(io.StringIO(from_files)))


def test_the_dashboard_filters_narrow_the_export(two_runs, capsys):
    results, ids = two_runs
    _, out, _ = _export(capsys, "--format", "csv", "--results-dir", str(results), "--backend", "emulated",
                        "--precision", "fp8_rowwise", "--runs", ids[1])
    frame = pd.read_csv(io.StringIO(out))
    assert list(zip(frame["backend"], frame["precision"], frame["run_id"], strict=True)) == [
        ("emulated", "fp8_rowwise", ids[1])]
    _, out, _ = _export(capsys, "--format", "csv", "--results-dir", str(results), "--runs", f"{ids[1]}..{ids[0]}")
    assert len(pd.read_csv(io.StringIO(out))) == 12  # a range in either order, both ends included


def test_parquet_round_trips(two_runs, tmp_path, capsys):
    results, _ = two_runs
    out = tmp_path / "x.parquet"
    code, _, err = _export(capsys, "--format", "parquet", "--out", str(out), "--results-dir", str(results))
    assert code == 0 and "12 row(s) written" in err
    frame = pd.read_parquet(out)
    assert len(frame) == 12 and frame["median_s"].dtype.kind == "f"


def test_github_action_benchmark_is_custom_smaller_is_better_latest_per_case(two_runs, capsys):
    results, ids = two_runs
    code, out, err = _export(capsys, "--format", "github-action-benchmark", "--results-dir", str(results))
    assert code == 0, err
    entries = json.loads(out)
    jsonschema.validate(entries, GAB_SCHEMA)
    assert len(entries) == 5 == len({e["name"] for e in entries})  # 6 cases, mxfp8 refused on torch
    assert all(e["unit"] == "ms" and e["value"] > 0 for e in entries)
    assert all(f"run {ids[1]}" in e["extra"] for e in entries)  # the latest run's value


def test_bencher_metric_format_validates_against_its_schema(two_runs, capsys):
    results, _ = two_runs
    code, out, _ = _export(capsys, "--format", "bencher", "--results-dir", str(results))
    assert code == 0
    bmf = json.loads(out)
    jsonschema.validate(bmf, BMF_SCHEMA)
    for measures in bmf.values():
        latency = measures["latency"]
        assert latency["lower_value"] <= latency["value"] <= latency["upper_value"]
        assert measures["sqnr-db"]["value"] > 15 and measures["throughput-tflops"]["value"] > 0


def test_trackers_get_measured_records_only():
    run = {"run_id": "r", "started_at": "2026-11-23T00:00:00", "device": {"name": "Test CPU"}}
    timed = record(64, "bf16", [1e-3, 2e-3, 3e-3])
    interpreted = {**record(64, "fp8_rowwise", [9.0, 9.0, 9.0], backend="triton"), "interpreted": True}
    skipped = record(64, "mxfp8", [], status="skipped", reason="no kernel")
    rows = [Row(run, r) for r in (timed, interpreted, skipped)]
    assert [e["name"] for e in github_action_benchmark(rows)] == ["gemm[m=64,n=64,k=64] bf16 torch cpu [Test CPU]"]
    assert list(bencher_metric_format(rows)) == ["gemm[m=64,n=64,k=64] bf16 torch cpu [Test CPU]"]


def test_trackers_take_the_gates_rule_for_power_capped_records():
    """A record an older fp8bench invalidated for power capping alone is measured for the gate (docs/energy.md), so a
    tracker gets it too; under --strict-clocks it stays out, as a thermal one always does."""
    why = "throttled: power cap (sw_power_cap) during the energy window"
    capped = {**record(64, "bf16", [1e-3] * 3), "status": "invalid", "valid": False, "reason": why,
              "energy": {"invalid_reasons": [why]}}
    thermal_why = "throttled: thermal (hw_thermal_slowdown) during the energy window"
    thermal = {**record(64, "fp32", [1e-3] * 3), "status": "invalid", "valid": False, "reason": thermal_why,
               "energy": {"invalid_reasons": [thermal_why]}}
    run = {"run_id": "r", "started_at": "t", "device": {"name": "GPU"}, "settings": {"strict_clocks": False}}
    strict = {**run, "settings": {"strict_clocks": True}}
    names = [e["name"] for e in github_action_benchmark([Row(run, capped), Row(run, thermal)])]
    assert names == ["gemm[m=64,n=64,k=64] bf16 torch cpu [GPU]"]
    assert not bencher_metric_format([Row(strict, capped)])


def test_energy_metric_for_github_action_benchmark():
    run = {"run_id": "r", "started_at": "t", "device": {"name": "GPU"}}
    rows = [Row(run, {**record(64, "bf16", [1e-3] * 3), "energy_j": 0.25}),
            Row(run, {**record(64, "fp32", [1e-3] * 3), "energy_j": None})]
    (entry,) = github_action_benchmark(rows, "energy_j")
    assert entry["unit"] == "J" and entry["value"] == 0.25 and "range" not in entry


def test_nothing_matched_exits_1_and_writes_nothing(two_runs, tmp_path, capsys):
    results, _ = two_runs
    out = tmp_path / "none.csv"
    code, _, err = _export(capsys, "--format", "csv", "--results-dir", str(results), "--workload", "attention",
                           "--out", str(out))
    assert code == 1 and "nothing written" in err and not out.exists()


@pytest.mark.parametrize("argv,message", [
    (["--format", "parquet"], "--format parquet writes a binary file: give --out PATH"),
    (["--format", "csv", "--runs", "nope..also-nope"], "no run 'nope', 'also-nope'"),
    (["--format", "yaml"], "invalid choice: 'yaml'"),
])
def test_bad_input_exits_2(two_runs, capsys, argv, message):
    results, _ = two_runs
    code, _, err = _export(capsys, *argv, "--results-dir", str(results))
    assert code == 2 and message in err


def test_a_corrupt_file_is_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    good = tmp_path / "good.json"
    atomic_write_json(good, payload("r1", [record(64, "bf16", [1e-3] * 3)]))
    code, _, err = _export(capsys, str(good), str(bad), "--format", "csv")
    assert code == 2 and "bad.json" in err
