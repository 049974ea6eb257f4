"""What a run file must hold, and opening one safely: the errors readers raise, the checks of the header and of
each record that the store and the gate rely on, and reading only regular files.

Both layouts (:mod:`fp8bench.results.runfile`) hold the same header and records, so the checks are the same for
both; :mod:`fp8bench.results.runfile_reader` reads them.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from fp8bench.core.records import SCHEMA_VERSION, STATUSES, case_key
from fp8bench.results.record_check import MAX_DEPTH, describe, record_problems, run_problems


class RunFileError(ValueError):
    """A run file that cannot be read: missing, corrupt, not a run, or from a newer schema."""


_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is, in words, when it is one of the kinds a run file must not be."""
    return next((name for test, name in _KINDS if test(mode)), None)


def open_regular(path: Path | str, what: str) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file; :class:`RunFileError` naming it otherwise.

    A glob such as ``results/*.json`` can match a FIFO (opening it would wait for a writer forever) or a link to
    ``/dev/zero`` (reading it never ends), so the file is opened without blocking and its type checked on the open
    descriptor, before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise RunFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = file_kind(mode) or "not a regular file"
        raise RunFileError(f"cannot read {what} {path}: it is {kind}, not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def load_json(path: Path | str, what: str) -> Any:
    """Parse a JSON file; raises :class:`RunFileError` naming the file (``what``: "run file", ...) and the fault."""
    try:
        with open_regular(path, what) as fh:
            text = fh.read().decode("utf-8")
    except OSError as exc:
        raise RunFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise RunFileError(f"{what} {path} is not a JSON text file (byte {exc.start} is not UTF-8 text); is it "
                           "a binary or compressed file?") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunFileError(f"{what} {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                           f"{exc.msg}); it may be truncated or corrupted") from exc
    except RecursionError as exc:
        raise RunFileError(f"{what} {path} nests objects or lists deeper than a results file can (at most "
                           f"{MAX_DEPTH} levels in a record)") from exc


def validate_run(data: Any, origin: str) -> dict[str, Any]:
    check_header(data, origin)
    validate_records(data["records"], origin)
    return data


def check_header(data: Any, origin: str) -> None:
    """Everything of a run file but its records: the layout, the schema version and the run header's fields."""
    if not isinstance(data, dict) or "schema_version" not in data or "records" not in data or "run" not in data:
        raise RunFileError(f"{origin} is not an fp8bench run file (needs schema_version, run and records)")
    version = data["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise RunFileError(f"{origin}: schema_version must be a positive integer (this fp8bench reads 1 to "
                           f"{SCHEMA_VERSION}), got {version!r}")
    if version > SCHEMA_VERSION:
        raise RunFileError(f"{origin} has schema version {version}, newer than this fp8bench understands "
                           f"({SCHEMA_VERSION}); upgrade fp8bench to read it")
    run = data["run"]
    if not isinstance(data["records"], list) or not isinstance(run, dict) or not isinstance(run.get("run_id"), str):
        raise RunFileError(f"{origin}: 'run' must be an object with a run_id (text) and 'records' a list")
    problems = run_problems(run)
    if problems:
        raise RunFileError(f"{origin}: run header: {problems[0]}")


# Fields every record needs to be identified (its case key) and stored, and their JSON types.
REQUIRED_FIELDS = {"workload": str, "shape": dict, "precision": str, "backend": str, "device": str, "status": str}


def check_seconds(value: Any, where: str) -> float:
    """A timing value as float seconds; :class:`RunFileError` naming ``where`` unless finite and positive."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise RunFileError(f"{where} is {value!r}; timing samples must be finite positive seconds (the file is "
                           "damaged or was not written by a timer)")
    return float(value)


def validate_records(records: list[Any], origin: str) -> None:
    """Raise :class:`RunFileError` at the first record that :func:`check_record` refuses."""
    for i, rec in enumerate(records):
        check_record(rec, i, origin)


def check_record(rec: Any, i: int, origin: str) -> None:
    """Raise :class:`RunFileError`, naming the file and the record's index, unless record ``i`` is an object with
    the required fields, every field of the type its readers expect (:mod:`fp8bench.results.record_check`), and its
    samples and median finite positive seconds."""
    if not isinstance(rec, dict):
        raise RunFileError(f"{origin}: record {i} is not an object (got {type(rec).__name__})")
    for name, kind in REQUIRED_FIELDS.items():
        if not isinstance(rec.get(name), kind):
            got = "missing" if name not in rec else describe(rec[name])
            raise RunFileError(f"{origin}: record {i}: field {name!r} must be {kind.__name__}, got {got}")
    if rec["status"] not in STATUSES:
        raise RunFileError(f"{origin}: record {i}: status {rec['status']!r}; accepted: {', '.join(STATUSES)}")
    problems = record_problems(rec)
    if problems:
        raise RunFileError(f"{origin}: record {i}: {problems[0]}")
    samples = rec.get("samples_s")
    if samples is None:
        samples = []
    where = f"{origin}: record {i} ({case_key(rec)})"
    for j, value in enumerate(samples):
        check_seconds(value, f"{where}: sample {j}")
    if rec.get("median_s") is not None:
        check_seconds(rec["median_s"], f"{where}: median_s")
