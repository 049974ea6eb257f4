"""Streaming a run's records to where they are kept: the run file (the record of truth) and the store.

Each finished record is appended to the run file (one synced line, :mod:`fp8bench.results.runfile`) and inserted
into the store. What can go wrong on the way, and what happens then:

* **The store fails** (stopped, stalled past its statement timeout, full, refusing a value): the error becomes one
  line (:func:`fp8bench.core.redact.error_line`: the driver's message, no SQL or parameter dump, no password) and the
  store is not written again in this run, so a stalled database costs one timeout instead of one per record. The
  run file is complete; ``fp8bench ingest RUN_FILE`` adds it to the store later.
* **The disk fills** (``ENOSPC``, or ``EDQUOT`` for a quota) while a record is appended: the file is cut back to
  its last whole line, the record is held by the writer, still goes to the store, and :class:`DiskFull` stops the
  run. :meth:`finish` retries once, writing the held record and the closing header with status ``failed: disk
  full``; if that fails too, the file on disk still holds every record before it.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from fp8bench.core.records import Record
from fp8bench.core.redact import error_line
from fp8bench.core.run_header import load_header
from fp8bench.results.runfile import RunFileWriter

STATUS_DISK_FULL = "failed: disk full"
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(Exception):
    """The run file's file system is full: the run stops with what it has."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _DISK_FULL_ERRNOS


class RecordStream:
    """A run's header and records, streamed to a run file (optional) and a store (optional)."""

    def __init__(self, run_file: Path | None, header: dict[str, Any], store: Any | None) -> None:
        self.run_file, self.header, self.store = run_file, header, store
        self.records: list[Record] = []
        self.store_errors: list[str] = []  # one line each; at most one per run (the store is then left alone)
        self.disk_error: str | None = None  # set when the run file's disk filled
        self.file_complete = run_file is not None  # the run file on disk holds every record and the final header
        try:
            self.writer = RunFileWriter(run_file, header) if run_file else None
        except OSError as exc:
            if is_disk_full(exc):
                raise DiskFull(f"cannot write the run file {run_file}: {exc.strerror}") from exc
            raise
        self._to_store("add_run", header)

    def _to_store(self, method: str, *args: Any) -> None:
        if self.store is None or self.store_errors:
            return
        try:
            getattr(self.store, method)(*args)
        except Exception as exc:  # the store must never cost a measurement
            self.store_errors.append(error_line(exc))

    def _write(self, action: Any, *args: Any, **kwargs: Any) -> None:
        try:
            action(*args, **kwargs)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            self.file_complete = False
            self.disk_error = f"{exc.strerror} writing {self.run_file}"

    def add(self, record: Record) -> None:
        """Keep ``record``: in memory as it is, in the run file and the store as its JSON fields
        (:meth:`Record.to_dict`, the one place a streamed record becomes a dict). Raises :class:`DiskFull` after
        storing it when the run file could not take it."""
        self.records.append(record)
        fields = record.to_dict()
        if self.writer is not None:
            self._write(self.writer.append, fields)
        self._to_store("add_records", self.header["run_id"], [fields], load_header(self.header).device.name)
        if self.disk_error:
            raise DiskFull(self.disk_error)

    def finish(self, **fields: Any) -> None:
        """Write the final header (status, counts): the run file once more (the retry after a full disk), then
        the store."""
        self.header.update(fields)
        if self.writer is not None:
            self.file_complete = True
            self._write(self.writer.finish, **fields)
        self._to_store("update_run", self.header)
