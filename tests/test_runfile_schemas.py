"""Run files of both schemas, as fp8bench wrote them, read by every reader: whole, record by record, ingested into
a store, compared by the gate, exported, and a round folder's git flag.

``tests/data/runfiles/`` holds real files, written by ``fp8bench run --shape 64x64x64 --backend torch
--precision bf16 fp8_rowwise`` on a CPU (``*-complete``) and by a run of four precisions killed with SIGKILL after
its second record (``*-killed``): schema 1 by fp8bench before run files were appended to, schema 2 after.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from fp8bench.cli import main
from fp8bench.results.ingest import ingest_file, load_side, read_results_file
from fp8bench.results.runfile import SCHEMA_VERSION, read_run_file
from fp8bench.results.runfile_reader import read_run_header, stream_run_file
from fp8bench.results.store import open_store

DATA = Path(__file__).resolve().parent / "data" / "runfiles"
# file -> (schema version, run status, records)
EXPECTED = {"schema1-complete.json": (1, "complete", 2), "schema1-killed.json": (1, "running", 2),
            "schema2-complete.json": (2, "complete", 2), "schema2-killed.json": (2, "running", 2)}


def test_the_data_folder_holds_the_files_these_tests_expect():
    assert sorted(p.name for p in DATA.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_schema_reads_whole_and_streamed_alike(name):
    version, status, n = EXPECTED[name]
    data = read_run_file(DATA / name)
    assert (data["schema_version"], data["run"]["status"], len(data["records"])) == (version, status, n)
    assert [r["seq"] for r in data["records"]] == list(range(n))
    streamed = stream_run_file(DATA / name)
    assert streamed is not None
    assert streamed.header == {"schema_version": version, "run": data["run"]}
    assert list(streamed.records()) == data["records"]
    assert read_run_header(DATA / name) == streamed.header
    assert read_results_file(DATA / name) == (data, "fp8bench")


def test_a_schema_1_file_reads_as_the_json_document_it_is():
    for name in ("schema1-complete.json", "schema1-killed.json"):
        assert read_run_file(DATA / name) == json.loads((DATA / name).read_text())


def test_a_schema_2_file_has_the_closing_header_of_a_finished_run():
    lines = [json.loads(line) for line in (DATA / "schema2-complete.json").read_text().splitlines()]
    assert list(lines[0]) == ["schema_version", "run"] and lines[0]["run"]["status"] == "running"
    assert [list(line) for line in lines[1:]] == [["record"], ["record"], ["run"]]
    assert read_run_file(DATA / "schema2-complete.json")["run"] == lines[-1]["run"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_schema_is_ingested_whole(tmp_path, name):
    data = read_run_file(DATA / name)
    store = open_store(tmp_path / "store")
    done = ingest_file(store, DATA / name)
    assert (done["records_added"], done["records_in_file"], done["records_skipped"]) == (len(data["records"]),) * 2 \
        + ([],)
    run_id = data["run"]["run_id"]
    assert store.runs_frame().set_index("run_id").loc[run_id, "status"] == data["run"]["status"]
    assert [r["seq"] for r in store.run_payload(run_id)["records"]] == [r["seq"] for r in data["records"]]


def test_the_gate_compares_a_schema_1_run_with_a_schema_2_run(tmp_path, capsys):
    old, new = DATA / "schema1-complete.json", DATA / "schema2-complete.json"
    assert [p["run"]["run_id"] for p in load_side(str(old)) + load_side(str(new))] == \
        [read_run_file(old)["run"]["run_id"], read_run_file(new)["run"]["run_id"]]
    code = main(["gate", str(old), str(new), "--no-store-report", "--report-dir", str(tmp_path / "rep"), "--json"])
    out = capsys.readouterr().out
    assert code in (0, 1, 2), out  # a verdict (measured on a shared CPU), not a usage or harness error
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    compared = {c["case"]: (c["n_base"], c["n_cand"]) for c in report["cases"]}
    (base,) = [r for r in read_run_file(old)["records"] if r["precision"] == "bf16"]
    (cand,) = [r for r in read_run_file(new)["records"] if r["precision"] == "bf16"]
    assert compared["gemm[m=64,n=64,k=64] bf16 torch cpu"] == (len(base["samples_s"]), len(cand["samples_s"]))


def test_export_reads_both_schemas(tmp_path):
    out = tmp_path / "runs.csv"
    assert main(["export", *(str(DATA / n) for n in sorted(EXPECTED)), "--format", "csv", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == sum(n for _, _, n in EXPECTED.values())


def test_a_round_folder_of_both_schemas_gives_its_git_flag(tmp_path):
    from fp8bench.orchestration.ab import side_dirty

    folder = tmp_path / "base"
    folder.mkdir()
    shutil.copy(DATA / "schema1-complete.json", folder / "r00.json")
    assert side_dirty(folder) is False
    shutil.copy(DATA / "schema2-complete.json", folder / "r01.json")
    assert side_dirty(folder) is True


def test_a_schema_below_the_first_is_refused_by_ingest_naming_the_versions_it_reads(tmp_path, capsys):
    data = read_run_file(DATA / "schema1-complete.json")
    data["schema_version"] = 0
    bad = tmp_path / "zero.json"
    bad.write_text(json.dumps(data))
    assert main(["ingest", str(bad), "--store", str(tmp_path / "store")]) == 2
    message = f"schema_version must be a positive integer (this fp8bench reads 1 to {SCHEMA_VERSION}), got 0"
    assert message in capsys.readouterr().err
