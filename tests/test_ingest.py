"""Reading results files: fp8bench run files, pytest-benchmark JSON, folders of rounds, store run ids."""

from __future__ import annotations

import json

import pytest

from fp8bench.results.ingest import from_pytest_benchmark, load_side, read_results_file
from fp8bench.results.runfile import RunFileError, atomic_write_json
from fp8bench.results.store import open_store
from tests.gate_fixtures import payload, record


def pytest_benchmark_json(extra_info=None, machine_fp8bench=None):
    machine = {"node": "runner-1", "processor": "x86_64", "machine": "x86_64", "python_version": "3.11.7",
               "system": "Linux", "cpu": {"brand_raw": "Test CPU"}}
    if machine_fp8bench:
        machine["fp8bench"] = machine_fp8bench
    return {"machine_info": machine,
            "commit_info": {"id": "abc123", "branch": "main", "dirty": False},
            "datetime": "2026-11-21T10:00:00.000000+00:00", "version": "5.3.1",
            "benchmarks": [{"group": None, "name": "test_sort[1000]", "fullname": "bench/test_x.py::test_sort[1000]",
                            "params": {"n": 1000}, "extra_info": extra_info or {},
                            "stats": {"min": 0.9e-3, "max": 1.4e-3, "mean": 1.05e-3, "stddev": 0.1e-3,
                                      "median": 1.0e-3, "iqr": 0.1e-3, "rounds": 4,
                                      "data": [0.9e-3, 1.0e-3, 1.0e-3, 1.4e-3]}}]}


def test_generic_pytest_benchmark_becomes_a_record():
    p = from_pytest_benchmark(pytest_benchmark_json())
    assert p["run"]["git"]["commit"] == "abc123" and p["run"]["device"]["name"] == "Test CPU"
    (r,) = p["records"]
    assert r["workload"] == "pytest" and r["backend"] == "pytest-benchmark"
    assert r["shape"] == {"test": "bench/test_x.py::test_sort[1000]"}
    assert r["median_s"] == 1.0e-3 and r["samples_s"] == [0.9e-3, 1.0e-3, 1.0e-3, 1.4e-3] and r["n"] == 4
    assert r["rsd"] == pytest.approx(0.1 / 1.05)


def test_run_id_is_derived_from_content_so_ingest_is_idempotent(tmp_path):
    f = tmp_path / "bench.json"
    f.write_text(json.dumps(pytest_benchmark_json()))
    (a, src), (b, _) = read_results_file(f), read_results_file(f)
    assert src == "pytest-benchmark" and a["run"]["run_id"] == b["run"]["run_id"]
    other = pytest_benchmark_json()
    other["datetime"] = "2026-11-21T11:00:00+00:00"
    assert from_pytest_benchmark(other)["run"]["run_id"] != a["run"]["run_id"]
    store = open_store(tmp_path / "store")
    assert store.ingest_run(a, src) == (True, 1)
    assert store.ingest_run(b, src) == (False, 0)
    assert store.runs_frame().iloc[0]["source"] == "pytest-benchmark"


def test_fp8bench_cases_in_pytest_benchmark_keep_their_record_and_environment():
    rec = record(64, "bf16", [1e-3, 1.1e-3])
    env = {"device": {"name": "NVIDIA H100 80GB HBM3"}, "device_spec": "cuda:0", "software": {"torch": "2.13.0"},
           "gpu": {"driver_version": "550.54.15", "power_limit_w": 700.0}, "settings": {"flush_l2": True},
           "git": {"commit": "feed", "dirty": False}}
    p = from_pytest_benchmark(pytest_benchmark_json({"fp8bench": rec}, env))
    (r,) = p["records"]
    assert r["workload"] == "gemm" and r["samples_s"] == [1e-3, 1.1e-3]
    assert p["run"]["gpu"]["power_limit_w"] == 700.0 and p["run"]["git"]["commit"] == "feed"
    assert p["run"]["device"]["name"] == "NVIDIA H100 80GB HBM3"


def test_unreadable_files_name_the_problem(tmp_path):
    with pytest.raises(RunFileError, match="cannot read results file"):
        read_results_file(tmp_path / "missing.json")
    half = tmp_path / "half.json"
    half.write_text('{"benchmarks": [')
    with pytest.raises(RunFileError, match="not valid JSON"):
        read_results_file(half)
    odd = tmp_path / "odd.json"
    odd.write_text('{"benchmarks": []}')
    with pytest.raises(RunFileError, match="no machine_info"):
        read_results_file(odd)
    newer = tmp_path / "newer.json"
    atomic_write_json(newer, {**payload("x", []), "schema_version": 42})
    with pytest.raises(RunFileError, match="schema version 42, newer"):
        read_results_file(newer)


def test_load_side_from_file_folder_and_store(tmp_path):
    rounds_dir = tmp_path / "rounds"
    for i in range(3):
        atomic_write_json(rounds_dir / f"r{i:02d}.json", payload(f"run{i}", [record(64, "bf16", [1.0])]))
    assert [p["run"]["run_id"] for p in load_side(str(rounds_dir))] == ["run0", "run1", "run2"]
    assert len(load_side(str(rounds_dir / "r01.json"))) == 1
    store = open_store(tmp_path / "store")
    for p in load_side(str(rounds_dir)):
        store.ingest_run(p)
    assert [p["run"]["run_id"] for p in load_side("run2,run0", store)] == ["run2", "run0"]
    with pytest.raises(RunFileError, match="give --store"):
        load_side("run0")
    with pytest.raises(RunFileError, match="no such results file or folder: .*missing.json"):
        load_side(str(tmp_path / "missing.json"), store)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunFileError, match="no \\*.json"):
        load_side(str(tmp_path / "empty"))
