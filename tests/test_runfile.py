import json

import pytest

from fp8bench.core.records import SCHEMA_VERSION
from fp8bench.results.runfile import RunFileError, RunFileWriter, check_writable, read_run_file


def test_writer_rewrites_a_complete_file_after_each_record(tmp_path):
    path = tmp_path / "runs" / "x.json"
    writer = RunFileWriter(path, {"run_id": "x"})
    assert read_run_file(path)["records"] == []
    case = {"workload": "gemm", "shape": {"m": 8, "n": 8, "k": 8}, "precision": "bf16", "backend": "torch",
            "device": "cpu", "status": "failed"}
    writer.append({**case, "seq": 0, "value": float("inf")})
    data = read_run_file(path)
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["records"] == [{**case, "seq": 0, "value": None}]  # JSON has no infinity
    writer.finish(status="complete")
    assert read_run_file(path)["run"]["status"] == "complete"
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]  # no temporary files left behind


def test_corrupt_truncated_and_foreign_files_are_refused_readably(tmp_path):
    truncated = tmp_path / "t.json"
    truncated.write_text('{"schema_version": 1, "run": {"run_id": "a"}, "records": [')
    with pytest.raises(RunFileError, match=r"t.json is not valid JSON \(line 1"):
        read_run_file(truncated)
    foreign = tmp_path / "f.json"
    foreign.write_text(json.dumps({"benchmarks": []}))
    with pytest.raises(RunFileError, match="is not an fp8bench run file"):
        read_run_file(foreign)
    with pytest.raises(RunFileError, match="cannot read run file"):
        read_run_file(tmp_path / "missing.json")


def test_newer_schema_is_refused(tmp_path):
    newer = tmp_path / "n.json"
    newer.write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1, "run": {"run_id": "a"}, "records": []}))
    with pytest.raises(RunFileError, match=f"schema version {SCHEMA_VERSION + 1}, newer than this fp8bench"):
        read_run_file(newer)


def test_unwritable_destination_fails_before_running(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(RunFileError, match="cannot write the run file"):
        check_writable(blocker / "run.json")
    with pytest.raises(RunFileError, match="it is a directory"):
        check_writable(tmp_path)
