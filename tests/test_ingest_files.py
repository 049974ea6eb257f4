"""`fp8bench ingest` one file at a time: a bad file is named with its first bad record, stores nothing (no orphan
run row) and does not stop the files after it; the store's refusals are one line, never a parameter dump.

The tests taking ``store_url`` also run against a real PostgreSQL server in ``test_store_postgres.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8bench.cli import main
from fp8bench.commands.verb_interface import EXIT_OK, EXIT_USAGE
from fp8bench.results.store import open_store
from tests.gate_fixtures import payload, record


@pytest.fixture
def store_url(tmp_path):
    return str(tmp_path / "store")


def good_run(run_id: str, n: int = 3) -> dict:
    return payload(run_id, [record(64 + i, "bf16", [1e-3, 1.1e-3, 0.9e-3]) for i in range(n)])


def write(path: Path, data: object, allow_nan: bool = False) -> Path:
    path.write_text(json.dumps(data, allow_nan=allow_nan))
    return path


def ingest(capsys, store: str, *files: Path) -> tuple[int, dict, str]:
    code = main(["ingest", *map(str, files), "--store", store, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out.strip().splitlines()[-1]), err


def stored_runs(store: str) -> set[str]:
    return set(open_store(store).runs_frame()["run_id"])


def test_bad_files_are_named_and_skipped_and_bad_records_alone_are_left_out(tmp_path, store_url, capsys):
    missing_field = good_run("missing-field")
    del missing_field["records"][2]["workload"]
    not_object = good_run("not-object")
    not_object["records"][1] = ["gemm", "bf16"]
    files = [write(tmp_path / "a.json", good_run("first")),
             write(tmp_path / "missing.json", missing_field),
             write(tmp_path / "list.json", not_object),
             tmp_path / "binary.json",
             write(tmp_path / "z.json", good_run("last"))]
    files[3].write_bytes(bytes(range(256)) * 4)
    code, summary, err = ingest(capsys, store_url, *files)
    assert code == EXIT_USAGE
    assert [r["run_id"] for r in summary["ingested"]] == ["first", "missing-field", "not-object", "last"]
    skipped = {r["run_id"]: r["records_skipped"] for r in summary["ingested"]}
    (missing,) = skipped["missing-field"]
    (listed,) = skipped["not-object"]
    assert "missing.json: record 2: field 'workload' must be str, got missing" in missing
    assert "list.json: record 1 is not an object (got list)" in listed
    (error,) = summary["errors"]  # a file that is not JSON at all is skipped whole
    assert "binary.json is not a JSON text file" in error["error"]
    assert "Traceback" not in err and err.count("skipped") == 3
    assert stored_runs(store_url) == {"first", "missing-field", "not-object", "last"}
    assert open_store(store_url).count_records() == 3 + 2 + 2 + 3


def test_nan_and_infinite_samples_are_one_line_errors_naming_the_record(tmp_path, store_url, capsys):
    nan = good_run("nan")
    nan["records"][1]["samples_s"] = [1e-3, float("nan")]
    inf = good_run("inf")
    inf["records"][0]["median_s"] = float("inf")
    files = [write(tmp_path / "nan.json", nan, allow_nan=True), write(tmp_path / "inf.json", inf, allow_nan=True)]
    code, summary, err = ingest(capsys, store_url, *files)
    assert code == EXIT_USAGE and not summary["errors"]
    (first,), (second,) = (r["records_skipped"] for r in summary["ingested"])
    assert "nan.json: record 1 (gemm[m=65,n=65,k=65] bf16 torch cpu): sample 1 is nan" in first
    assert "inf.json: record 0" in second and "median_s is inf" in second
    assert len(err.strip().splitlines()) == 2 and "[SQL" not in err and "parameters" not in err
    assert open_store(store_url).count_records() == 2 + 2


def test_over_long_ids_are_refused_in_one_line_naming_the_column(tmp_path, store_url, capsys):
    long_run = good_run("r" * 100)
    long_backend = good_run("ok-run")
    long_backend["records"][1]["backend"] = "b" * 300
    files = [write(tmp_path / "long_run.json", long_run), write(tmp_path / "long_backend.json", long_backend),
             write(tmp_path / "fine.json", good_run("fine"))]
    code, summary, err = ingest(capsys, store_url, *files)
    assert code == EXIT_USAGE and [r["run_id"] for r in summary["ingested"]] == ["fine"]
    first, second = (e["error"] for e in summary["errors"])
    assert "runs.run_id" in first and "100 characters long" in first and "at most 64" in first
    assert "records.backend" in second and "at most 40" in second
    assert "[SQL" not in err and "parameters" not in err
    assert stored_runs(store_url) == {"fine"}  # the long backend's run row went with its records


def test_a_non_finite_statistic_outside_the_samples_is_stored_as_null(tmp_path, store_url, capsys):
    run = good_run("odd-numerics")
    run["records"][0]["numerics"] = {"sqnr_db": float("inf"), "rel_err": float("nan")}
    code, summary, _ = ingest(capsys, store_url, write(tmp_path / "n.json", run, allow_nan=True))
    assert code == EXIT_OK and summary["ingested"][0]["records_added"] == 3
    stored = open_store(store_url).run_payload("odd-numerics")["records"][0]["numerics"]
    assert stored == {"sqnr_db": None, "rel_err": None}


def test_schema_version_below_one_is_refused(tmp_path, store_url, capsys):
    for version in (0, -3, True):
        bad = {**good_run(f"v{version}"), "schema_version": version}
        code, summary, _ = ingest(capsys, store_url, write(tmp_path / "v.json", bad))
        assert code == EXIT_USAGE and "schema_version must be a positive integer" in summary["errors"][0]["error"]


def test_store_path_with_a_question_mark_is_a_file_name(tmp_path, capsys):
    target = tmp_path / "what?ever#1"
    code, summary, _ = ingest(capsys, str(target), write(tmp_path / "a.json", good_run("q")))
    assert code == EXIT_OK
    assert (target / "fp8bench.sqlite").is_file() and not (tmp_path / "what").exists()
    assert stored_runs(str(target)) == {"q"}


def test_gate_report_of_many_rounds_is_stored_with_its_run_range(store_url):
    """Ten rounds' ids do not fit the report's run-id columns (PostgreSQL refused such a report): the columns keep
    the range, the report's data every id."""
    store = open_store(store_url)
    ids = [f"20261123T1836{i:02d}Z-5b1222" for i in range(10)]
    report = {"report_id": "ab1", "created_at": "2026-11-23T18:40:00+00:00", "base_run_id": ",".join(ids),
              "cand_run_id": ",".join(ids), "git_commit": "abc", "verdict": "pass", "exit_code": 0}
    assert store.add_gate_report(report)
    row = store.gate_reports_frame().iloc[0]
    assert row["base_run_id"] == f"{ids[0]}..{ids[-1]}"
    data = json.loads(row["data"]) if isinstance(row["data"], str) else row["data"]
    assert data["base_run_id"] == ",".join(ids)
