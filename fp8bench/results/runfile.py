"""Run files: the interchange format of a run, appended to as each case finishes.

Layout since schema 2: JSON Lines (one JSON object per line, UTF-8, ``\n`` after each), in a file that keeps the
``.json`` name users and scripts give it::

    {"schema_version": 2, "run": {run_id, started_at, status: "running", git, host, device, settings, ...}}
    {"record": {workload, shape, precision, backend, device, status, samples_s, ...}}
    {"record": {...}}                                   one line per finished case, in the order they finished
    {"run": {... the whole header again, status "complete", finished_at ...}}    the closing line

Appending a record writes that record's line and nothing else, then ``fsync``: a run's writes grow with its
records, not with their square (rewriting the whole file after each record took 430 s for 1,000 records of 12 KB).
The first line is written to a temporary file in the same folder and renamed into place (``os.replace`` is atomic
on POSIX), so the file exists whole or not at all; it gets the permissions of any new file (``0666`` less the
umask), not the ``0600`` of a temporary file. A ``{"run": ...}`` line replaces the header: the last one is the run's
header (the closing line; a run killed before it keeps the first, status ``running``).

A run killed at any moment keeps every record whose append returned: a crash inside a write leaves part of one
line at the end of the file, which readers drop (that record never finished). A write that fails (a full disk) is
cut back to the last whole line, and the record it held is written by the next write, so the file never holds a
damaged line before whole ones. Schema 1 files (one JSON document ``{"schema_version", "run", "records": [...]}``,
rewritten after every record by fp8bench before schema 2) are read as before: readers tell the two apart by the
first object, which is closed after ``run`` only in schema 2 (:mod:`fp8bench.results.runfile_reader`).

A rename replaces whatever has the name, so :func:`check_writable` refuses, before anything runs, a path that
exists and is not a regular file (a device node such as ``/dev/full``, a FIFO, a symbolic link, a folder), and
an existing run file unless overwriting was asked for.

Reading checks what the store and the gate rely on (:mod:`fp8bench.results.runfile_check`): only a regular file is
opened (never a FIFO or a device), every record is an object with its identifying fields and every field of the
type its readers expect (:mod:`fp8bench.results.record_check`), and every timing sample a finite positive number of
seconds; the error names the file and the first bad record. :func:`read_run_file` reads either schema.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from fp8bench.core.records import SCHEMA_VERSION
from fp8bench.results.runfile_check import (
    REQUIRED_FIELDS,
    RunFileError,
    check_header,
    check_record,
    check_seconds,
    file_kind,
    load_json,
    open_regular,
    validate_records,
    validate_run,
)
from fp8bench.results.runfile_reader import read_run

# The checks and the reader live below this module (runfile_check, runfile_reader); their names are kept here,
# where readers have always imported them from.
__all__ = ["REQUIRED_FIELDS", "RunFileError", "RunFileWriter", "atomic_write_bytes", "atomic_write_json",
           "check_header", "check_record", "check_seconds", "check_writable", "json_safe", "load_json",
           "open_regular", "read_run_file", "validate_records", "validate_run", "write_user_file"]


def json_safe(value: Any) -> Any:
    """JSON has no NaN or infinity; store them as null rather than write a file strict readers reject."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def _new_file_mode() -> int:
    """``0666`` less the process's umask: what ``open(path, "w")`` would create (mkstemp makes ``0600``)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write_json(path: Path, payload: Any) -> None:
    atomic_write_bytes(path, json.dumps(json_safe(payload), indent=1, allow_nan=False).encode())


def atomic_write_bytes(path: Path, data: bytes, replace: bool = True) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``: a reader sees the old file
    or the new one, never half of one. With ``replace=False`` the file is linked into place instead, which raises
    :class:`FileExistsError` if anything is at ``path``; with ``replace=True`` only a regular file (or nothing) is
    replaced (:class:`RunFileError` otherwise: a rename over a device node would remove the device)."""
    os.close(_place_new_file(path, data, replace))


def _write_all(fd: int, data: bytes, offset: int) -> None:
    """``pwrite`` until all of ``data`` is at ``offset`` (a write may take fewer bytes than it was given)."""
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


def _place_new_file(path: Path, data: bytes, replace: bool) -> int:
    """:func:`atomic_write_bytes`, returning the new file's descriptor, open for writing (the caller closes it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _new_file_mode())
        _write_all(fd, data, 0)
        os.fsync(fd)
        if not replace:
            os.link(tmp, path)
            os.unlink(tmp)
            return fd
        with contextlib.suppress(FileNotFoundError):
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode):
                kind = file_kind(mode) or "not a regular file"
                raise RunFileError(f"refusing to replace {path}: it is {kind}, not a regular file")
        os.replace(tmp, path)
        return fd
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise


def _line(value: dict[str, Any]) -> bytes:
    """One JSON Lines line: compact, ASCII (so no byte of it is a newline but the last), NaN and infinity as null."""
    return json.dumps(json_safe(value), allow_nan=False, separators=(",", ":")).encode() + b"\n"


class RunFileWriter:
    """Writes a run file (schema 2, the module docstring's layout): the header at once, each record as it comes,
    the final header at :meth:`finish`. Every write ends in ``fsync``, so a record is on disk when :meth:`append`
    returns; one that raises (``ENOSPC``) is held and written first by the next call."""

    def __init__(self, path: Path, run: dict[str, Any]) -> None:
        self.path = path
        self.run = dict(run)
        self._held: list[bytes] = []  # lines not on disk yet: a write of them failed
        first = _line({"schema_version": SCHEMA_VERSION, "run": self.run})
        self._fd: int | None = _place_new_file(path, first, replace=True)
        self._size = len(first)  # bytes of whole lines on disk; a failed write is cut back to it

    def append(self, record: dict[str, Any]) -> None:
        """Add one record's line, written and synced before this returns (O(record), whatever the run's size)."""
        self._held.append(_line({"record": record}))
        self._write_held()

    def finish(self, **fields: Any) -> None:
        """Close the run: update the header with ``fields`` and write it whole as the last line (after any record
        held by a failed write), then close the file. Raises as :meth:`append` does; calling it again retries."""
        self.run.update(fields)
        self._held.append(_line({"run": self.run}))
        self._write_held()
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _write_held(self) -> None:
        if self._fd is None:
            raise RunFileError(f"run file {self.path} was finished; nothing more can be written to it")
        data = b"".join(self._held)
        try:
            _write_all(self._fd, data, self._size)
            os.fsync(self._fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)  # no half line before what a later write adds
            raise
        self._size += len(data)
        self._held.clear()


def check_writable(path: Path, overwrite: bool = False, what: str = "the run file", flag: str = "--out") -> None:
    """Fail early, before any work, if ``path`` must not be replaced or its folder cannot take a new file.

    Refused: anything at ``path`` that is not a regular file (the file is renamed over it, which would replace a
    device node, a FIFO or a symbolic link itself), and an existing file unless ``overwrite`` (``--force``).
    ``what`` and ``flag`` name the file and the option that chose it in messages. Every verb that writes a file a
    user named goes through here (``run``, ``converge``, ``selfcheck``, ``export``, ``gate``, ``ab``)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise RunFileError(f"cannot write {what} {path}: {exc.strerror or exc}") from exc
    if mode is not None:
        kind = file_kind(mode)
        if kind is not None or not stat.S_ISREG(mode):
            raise RunFileError(f"refusing to write {what} over {path}: it is {kind or 'not a regular file'}; "
                               f"give {flag} a path to a new file")
        if not overwrite:
            raise RunFileError(f"{path} exists (an earlier run?); refusing to overwrite it: give {flag} a new path, "
                               "or --force to replace it")
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise RunFileError(f"cannot write {what} {path}: {exc.strerror or exc}") from exc


def write_user_file(path: Path, data: bytes, overwrite: bool, what: str, flag: str = "--out") -> None:
    """Write ``data`` to a path a user named, atomically, refusing at the moment of writing what
    :func:`check_writable` refuses (it may have changed since): without ``overwrite`` the new file is linked into
    place, which fails if anything has appeared at ``path``; with it, only a regular file is replaced."""
    check_writable(path, overwrite, what, flag)
    try:
        atomic_write_bytes(path, data, replace=overwrite)
    except FileExistsError as exc:
        raise RunFileError(f"{path} appeared while {what} was being written; refusing to overwrite it: give "
                           f"{flag} a new path, or --force to replace it") from exc
    except OSError as exc:
        raise RunFileError(f"cannot write {what} {path}: {exc.strerror or exc}") from exc


def read_run_file(path: Path | str) -> dict[str, Any]:
    """Load and check a run file of either schema (``{"schema_version", "run", "records": [...]}``); raises
    :class:`RunFileError` naming the file and what is wrong."""
    return read_run(path)
