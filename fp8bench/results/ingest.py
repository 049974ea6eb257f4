"""Reading results files into run payloads: fp8bench run files and pytest-benchmark JSON.

Both become the run-file layout ``{"schema_version", "run": {...}, "records": [...]}`` that the store, the gate and
the dashboard understand.

pytest-benchmark JSON (``pytest --benchmark-json=FILE``) holds ``machine_info``, ``commit_info``, ``datetime`` and a
list of ``benchmarks``, each with ``name``, ``fullname``, ``params``, ``stats`` (min, median, iqr, rounds, and the raw
``data`` when ``--benchmark-save-data`` was given) and ``extra_info``. Cases measured through fp8bench's pytest
plugin (:mod:`fp8bench.pytest_plugin`) carry their full fp8bench record in ``extra_info["fp8bench"]`` and the run's
environment in ``extra_info["fp8bench_run"]`` (older files: ``machine_info["fp8bench"]``); they ingest exactly like
cases of ``fp8bench run``. Any other benchmark becomes a record of workload ``pytest`` and backend ``pytest-benchmark``,
keyed by its test id.

A pytest-benchmark file has no run id, so one is derived from its content (start time, machine, commit and test
ids): ingesting the same file twice stores it once.

:func:`ingest_file` stores one file in its own transaction: a file that cannot be read (not a regular file, binary,
not JSON, a record missing a field or with a field of the wrong type, a sample that is not finite positive seconds)
or that the store refuses (a value its column cannot hold, two records with one seq) is reported with its name, the
record's index and what is wrong, stores nothing, and does not stop the files after it. An fp8bench run file is
streamed record by record (:mod:`fp8bench.results.runfile_reader`), so memory does not grow with the file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fp8bench.core.records import SCHEMA_VERSION
from fp8bench.results.runfile import RunFileError, load_json, validate_records, validate_run

if TYPE_CHECKING:  # the store (SQLAlchemy) loads only when a file is ingested
    from fp8bench.results.store import Store

SOURCE_FP8BENCH = "fp8bench"
SOURCE_PYTEST_BENCHMARK = "pytest-benchmark"


def is_pytest_benchmark(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list) and "machine_info" in data


def read_results_file(path: str | Path) -> tuple[dict[str, Any], str]:
    """A run payload and its source (``fp8bench`` or ``pytest-benchmark``) from either kind of file (a run file of
    either schema, :mod:`fp8bench.results.runfile`)."""
    from fp8bench.results.runfile_reader import stream_run_file

    path = Path(path)
    streamed = stream_run_file(path, "results file")
    if streamed is not None:
        return {**streamed.header, "records": list(streamed.records())}, SOURCE_FP8BENCH
    data = load_json(path, "results file")
    if is_pytest_benchmark(data):
        payload = from_pytest_benchmark(data, str(path))
        validate_records(payload["records"], str(path))
        return payload, SOURCE_PYTEST_BENCHMARK
    if isinstance(data, dict) and "benchmarks" in data:
        raise RunFileError(f"{path} looks like pytest-benchmark JSON but has no machine_info")
    return validate_run(data, str(path)), SOURCE_FP8BENCH


def _content_run_id(data: dict[str, Any]) -> str:
    ident = {"datetime": data.get("datetime"), "machine": data.get("machine_info"),
             "commit": data.get("commit_info"), "tests": [b.get("fullname") for b in data["benchmarks"]]}
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()
    return "pytest-" + digest[:20]


def _generic_record(bench: dict[str, Any], device: str, seq: int) -> dict[str, Any]:
    stats = bench.get("stats") or {}
    mean, std = stats.get("mean"), stats.get("stddev")
    return {"workload": "pytest", "shape": {"test": bench.get("fullname") or bench.get("name")},
            "precision": "n/a", "backend": SOURCE_PYTEST_BENCHMARK, "device": device, "status": "ok",
            "reason": None, "samples_s": list(stats.get("data") or []), "median_s": stats.get("median"),
            "iqr_s": stats.get("iqr"), "rsd": (std / mean) if mean and std is not None else None,
            "n": stats.get("rounds") or 0, "valid": True, "seq": seq,
            "extra": {"pytest_benchmark": {k: bench.get(k) for k in ("name", "fullname", "group", "params")},
                      "extra_info": bench.get("extra_info") or {}}}


def _pytest_run_environment(data: dict[str, Any]) -> dict[str, Any]:
    """The fp8bench run header of a pytest-benchmark file: each fp8bench benchmark's ``extra_info["fp8bench_run"]``,
    or, in files written before it moved there, ``machine_info["fp8bench"]``."""
    for bench in data["benchmarks"]:
        env = (bench.get("extra_info") or {}).get("fp8bench_run")
        if isinstance(env, dict):
            return env
    env = (data.get("machine_info") or {}).get("fp8bench")
    return env if isinstance(env, dict) and "host_alias" not in env else {}


def from_pytest_benchmark(data: dict[str, Any], origin: str = "pytest-benchmark JSON") -> dict[str, Any]:
    """Convert pytest-benchmark JSON to a run payload (see the module docstring)."""
    if not is_pytest_benchmark(data):
        raise RunFileError(f"{origin} is not pytest-benchmark JSON (needs machine_info and benchmarks)")
    machine = data.get("machine_info") or {}
    commit = data.get("commit_info") or {}
    env = _pytest_run_environment(data)
    cpu_name = (machine.get("cpu") or {}).get("brand_raw") or machine.get("processor")
    device_name = (env.get("device") or {}).get("name") or cpu_name
    run = {
        "run_id": _content_run_id(data), "started_at": data.get("datetime"), "finished_at": data.get("datetime"),
        "status": "complete", "source": SOURCE_PYTEST_BENCHMARK,
        "pytest_benchmark_version": data.get("version"),
        "git": env.get("git") or {"commit": commit.get("id"), "branch": commit.get("branch"),
                                  "dirty": commit.get("dirty")},
        "host": env.get("host") or {"alias": machine.get("node"), "os": machine.get("system")},
        "device": env.get("device") or {"name": device_name, "kind": "cpu"},
        "device_spec": env.get("device_spec"),
        "software": env.get("software") or {"python": machine.get("python_version")},
        "settings": env.get("settings") or {},
    }
    for optional in ("gpu", "flags", "env"):
        if optional in env:
            run[optional] = env[optional]
    records = []
    for seq, bench in enumerate(data["benchmarks"]):
        extra = bench.get("extra_info") or {}
        record = extra.get("fp8bench")
        if isinstance(record, dict) and {"workload", "shape", "precision", "backend", "status"} <= set(record):
            rec = {**record, "seq": seq}
            rec.setdefault("device", env.get("device_spec") or "cpu")
            rec["extra"] = {**(rec.get("extra") or {}), "pytest_benchmark": {
                k: bench.get(k) for k in ("name", "fullname", "group", "params")}}
            records.append(rec)
        else:
            records.append(_generic_record(bench, env.get("device_spec") or "cpu", seq))
    return {"schema_version": SCHEMA_VERSION, "run": run, "records": records}


def _with_origin(path: Path) -> dict[str, Any]:
    """A results file's payload, with ``origin`` (its path) for messages that must name the file."""
    return {**read_results_file(path)[0], "origin": str(path)}


def ingest_file(store: Store, path: Path) -> dict[str, Any]:
    """Read one results file and store it in one transaction. Returns what happened (``file``, ``run_id``,
    ``source``, ``new_run``, ``records_added``, ``records_in_file``), or ``{"file", "error"}`` with a one-line
    error naming the file; never raises for a bad file or a refused write."""
    import sqlalchemy as sa

    from fp8bench.core.redact import error_line
    from fp8bench.results.store import StoreError

    skipped: list[RunFileError] = []
    try:
        payload, source = _read_for_ingest(path, skipped.append)
    except RunFileError as exc:
        return {"file": str(path), "error": str(exc)}
    run_id = payload["run"]["run_id"]
    records = _Counted(payload["records"])
    try:
        new_run, added = store.ingest_run({**payload, "records": records}, source)
    except RunFileError as exc:  # a bad record found while streaming: the transaction is rolled back
        return {"file": str(path), "error": f"{exc}; run {run_id} not stored"}
    except StoreError as exc:
        return {"file": str(path), "error": f"{path}: run {run_id} not stored: {exc}"}
    except sa.exc.SQLAlchemyError as exc:
        return {"file": str(path), "error": f"{path}: run {run_id} not stored: {error_line(exc)}"}
    return {"file": str(path), "run_id": run_id, "source": source, "new_run": new_run, "records_added": added,
            "records_in_file": records.count + len(skipped), "records_skipped": [str(exc) for exc in skipped]}


def _read_for_ingest(path: Path, on_bad_record: Callable[[RunFileError], None]) -> tuple[dict[str, Any], str]:
    """A results file as a payload whose ``records`` may be an iterator: an fp8bench run file is streamed record
    by record (:mod:`fp8bench.results.runfile_reader`: bounded memory), and a record with a bad field goes to
    ``on_bad_record`` and is left out, so one bad record never costs the rest of its run. Any other file is read
    whole."""
    from fp8bench.results.runfile_reader import stream_run_file

    streamed = stream_run_file(path)
    if streamed is None:
        return read_results_file(path)  # pytest-benchmark JSON, or a run file in another key order
    return {**streamed.header, "records": streamed.records(on_bad_record)}, SOURCE_FP8BENCH


class _Counted:
    """An iterable of records that counts what was taken from it."""

    def __init__(self, records: Iterable[dict[str, Any]]) -> None:
        self._records, self.count = records, 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for record in self._records:
            self.count += 1
            yield record


def load_side(spec: str, store: Any | None = None) -> list[dict[str, Any]]:
    """Run payloads for one side of a comparison.

    ``spec`` is a results file, a folder of results files (the rounds of ``fp8bench ab``; ``*.json`` in name
    order), or comma-separated run ids in ``store`` (a store, or a function opening it: called only for run ids).
    """
    path = Path(spec)
    if path.is_file():
        return [_with_origin(path)]
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if not p.name.startswith("."))
        if not files:
            raise RunFileError(f"folder {path} has no *.json results files")
        return [_with_origin(p) for p in files]
    if spec.endswith(".json") or "/" in spec:
        raise RunFileError(f"no such results file or folder: {spec}")
    if store is not None:
        store = store() if callable(store) else store
        return [store.run_payload(run_id.strip()) for run_id in spec.split(",") if run_id.strip()]
    raise RunFileError(f"{spec!r} is neither a results file nor a folder of them (or a run id: give --store)")
