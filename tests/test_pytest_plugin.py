"""The fp8bench pytest plugin: registered, cheap when benchmarks are disabled, and its JSON ingests and gates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fp8bench.cli import main
from fp8bench.results.ingest import read_results_file
from fp8bench.results.store import open_store

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "workloads" / "suites" / "ci_bench"


def test_plugin_is_registered_through_its_entry_point(request):
    assert request.config.pluginmanager.hasplugin("fp8bench")
    assert request.config.getoption("fp8bench_device") == "auto"


def test_case_runs_quickly_when_benchmarks_are_disabled(fp8bench_case, request):
    # The project's own test run passes --benchmark-disable: the case must run, minimally, and be checked.
    assert request.config.getoption("benchmark_disable")
    record = fp8bench_case("gemm", "64x64x64", "bf16", backend="torch")
    assert record["status"] == "ok" and record["n"] == 3
    assert record["numerics"]["sqnr_db"] > 35
    with pytest.raises(RuntimeError, match="one case per test"):
        fp8bench_case("gemm", "64x64x64", "fp32")


def test_bad_case_names_are_refused(fp8bench_case):
    from fp8bench.core.registry import UnknownNameError

    with pytest.raises(UnknownNameError, match="fp9"):
        fp8bench_case("gemm", "64x64x64", "fp9")


@pytest.mark.slow
def test_ci_suite_json_ingests_and_gates(tmp_path, results_dir, capsys):
    out = tmp_path / "ci.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider", "--benchmark-enable",
         f"--benchmark-json={out}", "-k", "128x128x128 and (bf16 or rowwise)", "--fp8bench-max-time", "0.05",
         "--fp8bench-threads", "1", "--fp8bench-budget", "10"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    payload, source = read_results_file(out)
    assert source == "pytest-benchmark"
    records = payload["records"]
    assert [r["precision"] for r in records] == ["bf16", "fp8_rowwise"]
    for r in records:
        assert r["status"] == "ok" and r["workload"] == "gemm" and r["n"] >= 10 and len(r["samples_s"]) == r["n"]
        assert r["extra"]["pytest_benchmark"]["name"].startswith("test_gemm[128x128x128-")
    # pytest-benchmark's own statistics are fp8bench's samples.
    raw = json.loads(out.read_text())
    assert raw["benchmarks"][0]["stats"]["rounds"] == records[0]["n"]
    assert raw["benchmarks"][0]["stats"]["median"] == pytest.approx(records[0]["median_s"])
    assert payload["run"]["software"]["torch"] and payload["run"]["settings"]["threads"] == 1
    assert payload["run"]["device"]["name"]
    # Ingest twice: stored once.
    assert main(["ingest", str(out), str(out), "--results-dir", str(results_dir)]) == 0
    assert open_store(results_dir).count_records() == 2
    capsys.readouterr()
    # The same file as base and candidate: comparable (same key), nothing slower.
    rc = main(["gate", str(out), str(out), "--results-dir", str(results_dir), "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc in (0, 2) and not report["slower_cases"]
    assert {c["verdict"] for c in report["cases"]} <= {"same", "inconclusive"}
