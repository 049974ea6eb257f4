import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fp8bench.core.records import SCHEMA_VERSION
from fp8bench.results.runfile import RunFileError, RunFileWriter, check_writable, read_run_file

ROOT = Path(__file__).resolve().parents[1]


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


# -- appending in linear time, keeping every finished record -------------------------------------------------------
def _case(seq: int, samples: int = 100) -> dict:
    return {"workload": "gemm", "shape": {"m": 64, "n": 64, "k": 64}, "precision": "bf16", "backend": "torch",
            "device": "cpu", "status": "ok", "seq": seq, "samples_s": [1e-3 + j * 1e-9 for j in range(samples)],
            "median_s": 1e-3}


def _bytes_written() -> int:
    """Bytes this process has passed to write(2) so far (``wchar`` of /proc/self/io): every write, whatever the
    API that made it."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("/proc/self/io has no wchar line")


def test_appending_a_record_writes_the_record_not_the_run(tmp_path):
    """The bytes written by one append are about the record's size, whether it is the run's 5th record or its
    60th: a rewrite of the whole file after each record writes bytes in proportion to the records so far."""
    if not Path("/proc/self/io").exists():
        pytest.skip("counting written bytes needs /proc/self/io (Linux)")
    writer = RunFileWriter(tmp_path / "run.json", {"run_id": "x"})
    per_append = []
    for seq in range(60):
        before = _bytes_written()
        writer.append(_case(seq))
        per_append.append(_bytes_written() - before)
    record_bytes = len(json.dumps(_case(0)))
    early, late = sum(per_append[:10]) / 10, sum(per_append[-10:]) / 10
    assert late < 1.5 * early, f"bytes per append grew from {early:.0f} to {late:.0f}"
    assert late < 2 * record_bytes, f"an append wrote {late:.0f} bytes for a record of {record_bytes}"
    writer.finish(status="complete")
    data = read_run_file(tmp_path / "run.json")
    assert [r["seq"] for r in data["records"]] == list(range(60)) and data["run"]["status"] == "complete"


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from fp8bench.results.runfile import RunFileWriter
writer = RunFileWriter(Path(sys.argv[1]), {"run_id": "killed", "status": "running"})
for seq in range(int(sys.argv[2])):
    writer.append({"workload": "gemm", "shape": {"m": 8, "n": 8, "k": 8}, "precision": "bf16", "backend": "torch",
                   "device": "cpu", "status": "ok", "seq": seq, "samples_s": [1e-3], "median_s": 1e-3})
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("n", [0, 1, 7])
def test_a_writer_killed_after_n_records_leaves_a_file_with_those_n(tmp_path, n):
    path = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(path), str(n)], cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL
    data = read_run_file(path)
    assert data["run"]["status"] == "running" and [r["seq"] for r in data["records"]] == list(range(n))
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_a_record_cut_short_by_a_crash_is_left_out_and_the_ones_before_it_kept(tmp_path):
    """A crash inside the write of a record leaves part of its line at the end of the file: that record never
    finished, so it is dropped and every record before it is read."""
    path = tmp_path / "run.json"
    writer = RunFileWriter(path, {"run_id": "cut", "status": "running"})
    for seq in range(3):
        writer.append(_case(seq, samples=5))
    whole = path.read_bytes()
    writer.append(_case(3, samples=5))
    line = path.read_bytes()[len(whole):]
    for cut in (1, len(line) // 2, len(line) - 2):
        path.write_bytes(whole + line[:cut])
        assert [r["seq"] for r in read_run_file(path)["records"]] == [0, 1, 2], cut
    path.write_bytes(whole + line[:-1])  # only the newline missing: the record is whole
    assert [r["seq"] for r in read_run_file(path)["records"]] == [0, 1, 2, 3]


def test_a_damaged_line_before_the_end_is_refused_with_its_line_number(tmp_path):
    path = tmp_path / "run.json"
    writer = RunFileWriter(path, {"run_id": "bad"})
    for seq in range(3):
        writer.append(_case(seq, samples=5))
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2][: len(lines[2]) // 2]
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(RunFileError, match=r"run.json is not valid JSON \(line 3"):
        read_run_file(path)


def test_a_failed_append_leaves_whole_records_and_the_next_write_adds_the_held_one(tmp_path, monkeypatch):
    """A disk that fills inside an append: the file is cut back to its last whole record (a half-written line
    would hide the records after it), and the record is written by the next write (the run's final one)."""
    import fp8bench.results.runfile as runfile

    path = tmp_path / "run.json"
    writer = RunFileWriter(path, {"run_id": "full", "status": "running"})
    writer.append(_case(0, samples=5))
    real_fsync = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(runfile.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        writer.append(_case(1, samples=5))
    assert [r["seq"] for r in read_run_file(path)["records"]] == [0]
    monkeypatch.setattr(runfile.os, "fsync", real_fsync)
    writer.finish(status="failed: disk full")
    data = read_run_file(path)
    assert [r["seq"] for r in data["records"]] == [0, 1] and data["run"]["status"] == "failed: disk full"


def test_a_line_of_another_kind_is_refused_by_name(tmp_path):
    path = tmp_path / "run.json"
    RunFileWriter(path, {"run_id": "odd"}).append(_case(0, samples=2))
    with path.open("a") as fh:
        fh.write('{"notes": ["a line no fp8bench writes"]}\n')
    with pytest.raises(RunFileError, match=r"line 3 is neither a record line .* it holds 'notes'"):
        read_run_file(path)
