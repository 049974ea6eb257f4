"""Run files: the JSON interchange format of a run, written incrementally and atomically.

Layout: ``{"schema_version", "run": {run_id, started_at, finished_at, status, git, host, device, software,
settings, ...}, "records": [...]}``. After every finished case the whole file is rewritten to a temporary file in
the same folder and renamed over the old one (``os.replace`` is atomic on POSIX), so a run killed at any moment
leaves either the previous complete file or the new one, never half a file, and keeps every finished record.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from fp8bench.records import SCHEMA_VERSION


class RunFileError(ValueError):
    """A run file that cannot be read: missing, corrupt, not a run, or from a newer schema."""


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity; store them as null rather than write a file strict readers reject."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def atomic_write_json(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(_clean(payload), fh, indent=1, allow_nan=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunFileWriter:
    """Holds a run's header and records and rewrites the file after each change."""

    def __init__(self, path: Path, run: dict[str, Any]) -> None:
        self.path = path
        self.run = dict(run)
        self.records: list[dict[str, Any]] = []
        self.flush()

    def append(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        self.flush()

    def finish(self, **fields: Any) -> None:
        self.run.update(fields)
        self.flush()

    def payload(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "run": self.run, "records": self.records}

    def flush(self) -> None:
        atomic_write_json(self.path, self.payload())


def check_writable(path: Path) -> None:
    """Fail early, before any case runs, if ``path``'s folder cannot take the run file."""
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise RunFileError(f"cannot write the run file {path}: {exc.strerror or exc}") from exc
    if path.is_dir():
        raise RunFileError(f"cannot write the run file {path}: it is a directory")


def load_json(path: Path | str, what: str) -> Any:
    """Parse a JSON file; raises :class:`RunFileError` naming the file (``what``: "run file", ...) and the fault."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise RunFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunFileError(f"{what} {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                           f"{exc.msg}); it may be truncated or corrupted") from exc


def read_run_file(path: Path) -> dict[str, Any]:
    """Load and check a run file; raises :class:`RunFileError` naming the file and what is wrong."""
    return validate_run(load_json(path, "run file"), str(path))


def validate_run(data: Any, origin: str) -> dict[str, Any]:
    if not isinstance(data, dict) or "schema_version" not in data or "records" not in data or "run" not in data:
        raise RunFileError(f"{origin} is not an fp8bench run file (needs schema_version, run and records)")
    version = data["schema_version"]
    if not isinstance(version, int):
        raise RunFileError(f"{origin}: schema_version must be an integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise RunFileError(f"{origin} has schema version {version}, newer than this fp8bench understands "
                           f"({SCHEMA_VERSION}); upgrade fp8bench to read it")
    if not isinstance(data["records"], list) or not isinstance(data["run"], dict) or "run_id" not in data["run"]:
        raise RunFileError(f"{origin}: 'run' must be an object with a run_id and 'records' a list")
    return data
