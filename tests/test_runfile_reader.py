"""Reading a run file record by record: the same records and refusals as reading it whole, in memory that does not
grow with the file, and only from regular files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from fp8bench.results.ingest import ingest_file
from fp8bench.results.runfile import RunFileError
from fp8bench.results.store import open_store
from tests.gate_fixtures import payload, record

ROOT = Path(__file__).resolve().parents[1]


def run_file(path: Path, run_id: str, n: int, samples: int = 3, **dump: object) -> Path:
    recs = [record(64 + i, "bf16", [1e-3 * (1 + j / 1000) for j in range(samples)]) for i in range(n)]
    data = payload(run_id, recs)
    data["run"]["device"]["name"] = "Ünïcödé CPU ✓"  # multi-byte characters, split across chunks below
    path.write_text(json.dumps(data, **dump))  # type: ignore[arg-type]
    return path


def streamed(path: Path) -> tuple[dict, list[dict]]:
    from fp8bench.results.runfile_reader import stream_run_file

    opened = stream_run_file(path)
    assert opened is not None
    return opened.header, list(opened.records())


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_streamed_records_equal_the_whole_file_at_any_chunk_size(tmp_path, monkeypatch, chunk):
    import fp8bench.results.runfile_reader as stream

    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    for indent in (None, 1):
        path = run_file(tmp_path / "r.json", "s", 5, indent=indent)
        header, records = streamed(path)
        whole = json.loads(path.read_text())
        assert header == {"schema_version": whole["schema_version"], "run": whole["run"]}
        assert records == whole["records"]


def test_keys_after_the_records_are_read_and_a_cut_file_is_refused(tmp_path, monkeypatch):
    import fp8bench.results.runfile_reader as stream

    monkeypatch.setattr(stream, "CHUNK_BYTES", 64)
    path = tmp_path / "r.json"
    data = json.loads(run_file(path, "s", 3).read_text())
    path.write_text(json.dumps({**data, "after": {"x": [1, 2]}}))
    assert len(streamed(path)[1]) == 3
    text = json.dumps(data)
    for cut in (len(text) - 1, len(text) // 2):
        path.write_text(text[:cut])
        with pytest.raises(RunFileError) as refused:
            streamed(path)
        assert "is not valid JSON" in str(refused.value) and str(path) in str(refused.value)


def test_a_nan_sample_is_named_as_reading_the_whole_file_names_it(tmp_path, store_url_sqlite):
    data = payload("nan", [record(64, "bf16", [1e-3, 1e-3]), record(65, "bf16", [1e-3, float("nan")])])
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(data))  # NaN as Python writes it
    done = ingest_file(open_store(store_url_sqlite), path)
    (problem,) = done["records_skipped"]
    assert "record 1 (gemm[m=65,n=65,k=65] bf16 torch cpu): sample 1 is nan" in problem
    assert done["records_added"] == 1 and open_store(store_url_sqlite).count_records() == 1


def test_a_file_in_another_key_order_is_read_whole(tmp_path, store_url_sqlite):
    data = payload("reordered", [record(64, "bf16", [1e-3])])
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"records": data["records"], "run": data["run"], "schema_version": 1}))
    from fp8bench.results.runfile_reader import stream_run_file

    assert stream_run_file(path) is None
    done = ingest_file(open_store(store_url_sqlite), path)
    assert done["records_added"] == 1 and done["records_in_file"] == 1


def test_a_record_longer_than_the_window_bound_is_refused(tmp_path, monkeypatch):
    import fp8bench.results.runfile_reader as stream

    monkeypatch.setattr(stream, "MAX_RECORD_BYTES", 2000)
    monkeypatch.setattr(stream, "CHUNK_BYTES", 512)
    path = run_file(tmp_path / "big.json", "big", 2, samples=400)
    with pytest.raises(RunFileError) as refused:
        streamed(path)
    assert "record 0 is longer than" in str(refused.value)


def _peak_ingest_bytes(path: Path, store: str) -> int:
    tracemalloc.start()
    try:
        done = ingest_file(open_store(store), path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        assert "error" not in done, done


@pytest.mark.slow  # a file of many records, ingested while memory is watched
def test_ingest_memory_does_not_grow_with_the_file(tmp_path):
    """Python allocations while ingesting a run four times as long stay about the same (the store's batches and one
    chunk of text), where reading the whole file held all of it."""
    small = run_file(tmp_path / "small.json", "small", 600, samples=200)
    large = run_file(tmp_path / "large.json", "large", 2400, samples=200)
    assert large.stat().st_size > 3.9 * small.stat().st_size
    small_peak = _peak_ingest_bytes(small, str(tmp_path / "a"))
    large_peak = _peak_ingest_bytes(large, str(tmp_path / "b"))
    assert large_peak < 1.5 * small_peak, (small_peak, large_peak)


@pytest.fixture
def store_url_sqlite(tmp_path):
    return str(tmp_path / "store")


def test_a_fifo_and_dev_zero_matched_by_a_glob_are_refused_at_once(tmp_path):
    """Ingest opens nothing but regular files: a FIFO would block it forever, /dev/zero never end."""
    folder = tmp_path / "runs"
    folder.mkdir()
    os.mkfifo(folder / "a-fifo.json")
    (folder / "b-zero.json").symlink_to("/dev/zero")
    run_file(folder / "c-good.json", "good", 2)
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "fp8bench.cli", "ingest", *sorted(map(str, folder.glob("*.json"))),
                          "--store", str(tmp_path / "store"), "--json"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert time.monotonic() - started < 300
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    errors = {Path(e["file"]).name: e["error"] for e in summary["errors"]}
    assert "it is a FIFO (named pipe), not a regular file" in errors["a-fifo.json"]
    assert "it is a character device, not a regular file" in errors["b-zero.json"]
    assert [r["run_id"] for r in summary["ingested"]] == ["good"] and out.returncode == 2
