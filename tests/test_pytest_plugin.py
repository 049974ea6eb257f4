"""The fp8bench pytest plugin: registered, cheap when benchmarks are disabled, and its JSON ingests and gates."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import outside_xdist

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
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=outside_xdist(os.environ))
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


# The module docstring's example suite as a user writes it, plus a test that is not a benchmark. The shape comes
# from the environment so that a second night can run the same tests slower.
USER_SUITE = '''
import os

import pytest


@pytest.mark.parametrize("precision", ["bf16", "fp8_rowwise"])
def test_gemm(fp8bench_case, precision):
    record = fp8bench_case("gemm", os.environ.get("SUITE_SHAPE", "64x64x64"), precision, backend="torch")
    assert record["status"] in ("ok", "skipped"), record["reason"]


def test_not_a_benchmark():
    assert True
'''
QUICK_CASES = ["-p", "no:cacheprovider", "--fp8bench-max-time", "0.05", "--fp8bench-min-samples", "5",
               "--fp8bench-threads", "1", "--fp8bench-budget", "10"]


def run_user_suite(folder: Path, *args: str, shape: str = "64x64x64") -> subprocess.CompletedProcess[str]:
    """``pytest`` on USER_SUITE in ``folder``, as its own process with no project configuration (benchmarks on)."""
    (folder / "test_suite.py").write_text(USER_SUITE)
    return subprocess.run([sys.executable, "-m", "pytest", "test_suite.py", "-rs", *QUICK_CASES, *args], cwd=folder,
                          capture_output=True, text=True, timeout=300,
                          env={**outside_xdist(os.environ), "SUITE_SHAPE": shape})


def outcome_counts(output: str) -> dict[str, int]:
    """pytest's closing summary (``2 passed, 1 skipped in 3.1s``) as counts by outcome."""
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|skipped|failed|error)", output.splitlines()[-1])}


@pytest.mark.slow
def test_benchmark_only_measures_every_case_and_groups_them(tmp_path):
    out = tmp_path / "night.json"
    proc = run_user_suite(tmp_path, "--benchmark-only", f"--benchmark-json={out}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert outcome_counts(proc.stdout) == {"passed": 2, "skipped": 1}, proc.stdout[-2000:]
    raw = json.loads(out.read_text())
    assert [b["name"] for b in raw["benchmarks"]] == ["test_gemm[bf16]", "test_gemm[fp8_rowwise]"]
    for bench in raw["benchmarks"]:
        samples = bench["extra_info"]["fp8bench"]["samples_s"]
        assert bench["group"] == "gemm 64x64x64"
        # pytest-benchmark's statistics are fp8bench's samples, one round each.
        assert bench["stats"]["rounds"] == len(samples) >= 5
        assert bench["stats"]["min"] == min(samples) and bench["stats"]["max"] == max(samples)
        assert bench["extra_info"]["fp8bench_run"]["git"] is not None
        assert "load" in bench["extra_info"]["fp8bench_run"]["host"]
    # machine_info names the machine and nothing that changes between two nights on it.
    identity = raw["machine_info"]["fp8bench"]
    assert set(identity) == {"host_alias", "cpu_model", "device"} and identity["device"] == "auto"
    assert raw["benchmarks"][0]["extra_info"]["fp8bench_run"]["device"]["kind"] == "cpu"
    payload, _ = read_results_file(out)  # and it still ingests as fp8bench records with the run's environment
    assert payload["run"]["git"] == raw["benchmarks"][0]["extra_info"]["fp8bench_run"]["git"]
    assert payload["run"]["device"]["kind"] == "cpu" and len(payload["records"]) == 2


@pytest.mark.slow
def test_two_nights_compare_without_a_warning_and_compare_fail_catches_a_slower_case(tmp_path):
    storage = f"file://{tmp_path / 'benchmarks'}"
    first = run_user_suite(tmp_path, "--benchmark-only", "--benchmark-autosave", f"--benchmark-storage={storage}")
    assert first.returncode == 0, first.stdout[-3000:]
    # The second night runs each case on a 64x larger GEMM: far more than 10% slower, whatever the machine's load.
    second = run_user_suite(tmp_path, "--benchmark-only", "--benchmark-autosave", f"--benchmark-storage={storage}",
                            "--benchmark-compare", "--benchmark-compare-fail=median:10%", shape="256x256x256")
    assert second.returncode != 0, second.stdout[-3000:]
    assert "Performance has regressed" in second.stdout + second.stderr, second.stdout[-3000:]
    assert "test_gemm[bf16]" in second.stdout
    assert "machine_info is different" not in second.stdout + second.stderr
    saved = sorted((tmp_path / "benchmarks").rglob("*.json"))
    assert len(saved) == 2
    compare = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", *map(str, saved)],
                             capture_output=True, text=True, timeout=120)
    assert compare.returncode == 0, compare.stderr[-2000:]
    assert "test_gemm[fp8_rowwise]" in compare.stdout and "machine_info" not in compare.stdout + compare.stderr


def test_a_bad_fp8_format_is_reported_to_pytest_benchmark_as_the_benchmarks_error(request):
    """Every refusal of a case goes through pytest-benchmark's error path (the benchmark is marked errored and left
    out of its table and JSON), the format's own check included."""
    from fp8bench.pytest_plugin import _measure_case

    class Benchmark:  # what the plugin uses of pytest-benchmark's fixture
        enabled = True

        def __init__(self) -> None:
            self.errors: list[BaseException] = []

        def pedantic(self, target, args=(), **_):
            try:
                target(*args)
            except BaseException as exc:
                self.errors.append(exc)
                raise

    bench = Benchmark()
    with pytest.raises(ValueError, match="e9m9"):
        _measure_case(request, bench)("gemm", "64x64x64", "fp8_tensorwise", fp8_format="e9m9")
    assert len(bench.errors) == 1 and "e9m9" in str(bench.errors[0])


@pytest.mark.slow  # a pytest run in its own process
def test_more_threads_than_this_machine_has_cpus_is_refused_by_name(tmp_path):
    proc = run_user_suite(tmp_path, "--benchmark-disable", "--fp8bench-threads", "99999")
    assert proc.returncode != 0
    assert f"threads must be between 1 and this machine's {os.cpu_count()} CPUs, got 99999" in proc.stdout, \
        proc.stdout[-2000:]
