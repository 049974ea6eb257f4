"""Reading a run file one record at a time, in memory bounded by the largest record, not by the file.

A run of a large suite writes a run file of hundreds of megabytes (raw samples of every case). Parsing it whole
holds the text and every record's objects at once (a 200 MB file peaked above 1 GB while being ingested), so
:func:`stream_run_file` reads the header first, then hands out the records one by one. It reads both layouts
(:mod:`fp8bench.results.runfile`), told apart by the first object: closed right after ``run`` in schema 2.

**Schema 2, JSON Lines.** Each line is decoded on its own by the standard library's ``json.loads``. The header is
the last ``{"run": ...}`` line (the closing line written when the run finished), or the first line's when there is
none (a run killed before it), so the lines are read twice: once for the header, skipping record lines by their
first bytes, then for the records. A last line without its newline that is not valid JSON is what a crash inside
a write leaves: it is dropped, and every record before it read. A damaged line anywhere else is refused with its
line number.

**Schema 1, one JSON document.** The file is read in chunks of :data:`CHUNK_BYTES`; each value is decoded by
``json.JSONDecoder.raw_decode``, so what is accepted and refused (``NaN`` as careless tools write it, a nesting
too deep for the parser) is exactly what reading the whole file would accept and refuse. A record that does not
fit the window yet makes it grow, up to :data:`MAX_RECORD_BYTES`: a longer one is refused, which bounds memory
whatever the file holds. The incremental layout needs the keys in the order fp8bench writes them
(``schema_version``, ``run``, then ``records``); a file in another order, or one that is not a run file at all
(pytest-benchmark JSON), is read whole by :func:`fp8bench.results.runfile_check.load_json` instead.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from fp8bench.results.record_check import MAX_DEPTH
from fp8bench.results.runfile_check import (
    RunFileError,
    check_header,
    check_record,
    load_json,
    open_regular,
    validate_run,
)

CHUNK_BYTES = 1 << 20  # read size; a record is decoded once it is whole in the window
MAX_RECORD_BYTES = 64 << 20  # one record's text at most (a record with 100,000 raw samples is about 2.5 MB)

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _Window:
    """A sliding window of decoded text over a UTF-8 file, with the position of the next unread character."""

    def __init__(self, fh: BinaryIO, origin: str) -> None:
        self.fh, self.origin = fh, origin
        self.text, self.pos, self.eof = "", 0, False
        self.consumed_lines = 0  # newlines before the window's start, for messages
        self._utf8 = codecs.getincrementaldecoder("utf-8")()

    def fill(self) -> bool:
        """Drop what was read, append a chunk; ``False`` at the end of the file."""
        if self.eof:
            return False
        self.consumed_lines += self.text.count("\n", 0, self.pos)
        chunk = self.fh.read(CHUNK_BYTES)
        try:
            new = self._utf8.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            raise RunFileError(f"run file {self.origin} is not a JSON text file (it holds bytes that are not "
                               "UTF-8 text); is it a binary or compressed file?") from exc
        self.text, self.pos, self.eof = self.text[self.pos:] + new, 0, not chunk
        return True

    def skip_space(self) -> None:
        while True:
            self.pos = _SPACE.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text) or not self.fill():
                return

    def char(self) -> str:
        """The next non-space character, not consumed (``""`` at the end of the file)."""
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, chars: str) -> str:
        found = self.char()
        if not found or found not in chars:
            self.fail(f"expected {' or '.join(repr(c) for c in chars)}, found {found!r}" if found
                      else f"expected {' or '.join(repr(c) for c in chars)}; the file ends here (truncated?)")
        self.pos += 1
        return found

    def value(self, what: str) -> Any:
        """Decode the next JSON value, reading on while it is incomplete (up to :data:`MAX_RECORD_BYTES`)."""
        self.skip_space()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.text, self.pos)
            except json.JSONDecodeError as exc:
                if self.eof:
                    self.fail(exc.msg, exc.pos)
                if len(self.text) - self.pos > MAX_RECORD_BYTES:
                    raise RunFileError(f"run file {self.origin}: {what} is longer than {MAX_RECORD_BYTES >> 20} MiB "
                                       "of JSON text, or is not valid JSON") from exc
                self.fill()
                continue
            except RecursionError as exc:
                raise RunFileError(f"run file {self.origin}: {what} nests objects or lists deeper than a results "
                                   f"file can (at most {MAX_DEPTH} levels in a record)") from exc
            if end == len(self.text) and not self.eof and not isinstance(value, dict | list | str):
                # A number at the window's edge may go on in the next chunk ("12" of "1234").
                self.fill()
                continue
            self.pos = end
            return value

    def fail(self, msg: str, at: int | None = None) -> None:
        at = self.pos if at is None else at
        line = self.consumed_lines + self.text.count("\n", 0, at) + 1
        raise RunFileError(f"run file {self.origin} is not valid JSON (line {line}: {msg}); it may be truncated "
                           "or corrupted")


@dataclass
class OpenRunFile:
    """A run file's header, and its records on demand (each checked as it is read)."""

    path: Path
    header: dict[str, Any]  # {"schema_version", "run"}; "records" is read by records()
    _body: _DocumentBody | _LinesBody
    _fh: BinaryIO

    def records(self, on_bad_record: Callable[[RunFileError], None] | None = None) -> Iterator[dict[str, Any]]:
        """Each record, in file order, checked (:func:`fp8bench.results.runfile_check.check_record`); closes the file at
        the end. :class:`RunFileError` at the first bad byte, naming the file and where. A well-formed record with a bad
        field raises too, unless ``on_bad_record`` is given: then it receives the error (naming the file and the
        record's index) and the record is left out."""
        origin = str(self.path)
        try:
            for index, record in enumerate(self._body.values()):
                try:
                    check_record(record, index, origin)
                except RunFileError as exc:
                    if on_bad_record is None:
                        raise
                    on_bad_record(exc)
                else:
                    yield record
        finally:
            self._fh.close()

    def close(self) -> None:
        self._fh.close()


class _DocumentBody:
    """The records of a schema 1 file, from the window standing after ``"records": [``."""

    def __init__(self, window: _Window) -> None:
        self.window = window

    def values(self) -> Iterator[Any]:
        window = self.window
        if window.char() == "]":
            window.pos += 1
        else:
            index = 0
            while True:
                yield window.value(f"record {index}")
                index += 1
                if window.expect(",]") == "]":
                    break
        self._rest()

    def _rest(self) -> None:
        """The keys after ``records`` (read and dropped) and the closing brace, so that a file cut short after its
        records is refused as reading it whole would refuse it."""
        window = self.window
        while window.expect(",}") == ",":
            window.value("a key")
            window.expect(":")
            window.value("a value after the records")
        if window.char():
            window.fail("extra data after the run file's object")


RECORD_PREFIX = b'{"record":'  # how fp8bench writes a record line: the header pass skips these undecoded


class _LinesBody:
    """The lines after a schema 2 file's first, from byte ``start``: ``{"record": ...}`` and ``{"run": ...}``."""

    def __init__(self, fh: BinaryIO, origin: str, start: int) -> None:
        self.fh, self.origin, self.start = fh, origin, start

    def _lines(self) -> Iterator[tuple[int, bytes, bool]]:
        """``(line number, line, cut)`` of each line that is not blank; ``cut``: the last line, with no newline."""
        self.fh.seek(self.start)
        number = 1
        while line := self.fh.readline(MAX_RECORD_BYTES + 1):
            number += 1
            cut = not line.endswith(b"\n")
            if cut and len(line) > MAX_RECORD_BYTES:
                raise RunFileError(f"run file {self.origin}: line {number} is longer than "
                                   f"{MAX_RECORD_BYTES >> 20} MiB")
            if line.strip():
                yield number, line, cut

    def _decode(self, number: int, line: bytes, cut: bool) -> dict[str, Any] | None:
        """The line's one-key object; ``None`` for a cut last line that does not decode (a write a crash stopped)."""
        try:
            value = json.loads(line)
        except ValueError as exc:  # JSONDecodeError, or UnicodeDecodeError for bytes that are not UTF-8
            if cut:
                return None
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "bytes that are not UTF-8 text"
            raise RunFileError(f"run file {self.origin} is not valid JSON (line {number}: {msg}); it may be "
                               "truncated or corrupted") from exc
        except RecursionError as exc:
            raise RunFileError(f"run file {self.origin}: line {number} nests objects or lists deeper than a results "
                               f"file can (at most {MAX_DEPTH} levels in a record)") from exc
        if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in ("record", "run"):
            keys = ", ".join(map(repr, value)) if isinstance(value, dict) else type(value).__name__
            raise RunFileError(f"run file {self.origin}: line {number} is neither a record line ({{\"record\": "
                               f"...}}) nor a run header line ({{\"run\": ...}}); it holds {keys}")
        return value

    def last_header(self) -> dict[str, Any] | None:
        """The run header of the last ``{"run": ...}`` line, if any; record lines are skipped undecoded."""
        found = None
        for number, line, cut in self._lines():
            if line.startswith(RECORD_PREFIX):
                continue
            value = self._decode(number, line, cut)
            if value is not None and "run" in value:
                found = value["run"]
        return found

    def values(self) -> Iterator[Any]:
        for number, line, cut in self._lines():
            value = self._decode(number, line, cut)
            if value is not None and "record" in value:
                yield value["record"]


def stream_run_file(path: Path | str, what: str = "run file") -> OpenRunFile | None:
    """Open a run file for reading record by record, its header checked; ``None`` when the file does not start the
    way fp8bench writes run files (then read it whole). :class:`RunFileError` for a file that cannot be read (named
    as ``what`` in the message)."""
    path = Path(path)
    fh = open_regular(path, what)
    try:
        opened = _open_either(path, fh)
    except BaseException:
        fh.close()
        raise
    if opened is None:
        fh.close()
    return opened


def _open_either(path: Path, fh: BinaryIO) -> OpenRunFile | None:
    """Read the first object's keys: ``schema_version`` and ``run``, then ``records`` (schema 1) or the object's end
    (schema 2)."""
    window = _Window(fh, str(path))
    if window.char() != "{":
        return None
    window.pos += 1
    header: dict[str, Any] = {}
    while True:
        if window.char() != '"':
            return None
        key = window.value("a key")
        window.expect(":")
        if key == "records":
            if set(header) != {"schema_version", "run"} or window.char() != "[":
                return None
            window.pos += 1
            check_header({**header, "records": []}, str(path))
            return OpenRunFile(path, header, _DocumentBody(window), fh)
        if key not in ("schema_version", "run"):
            return None
        header[key] = window.value(f"{key!r}")
        if window.expect(",}") == "}":
            return _open_lines(path, fh, header) if set(header) == {"schema_version", "run"} else None


def _open_lines(path: Path, fh: BinaryIO, header: dict[str, Any]) -> OpenRunFile:
    """A schema 2 file whose first line is ``header``: its header is the last run line's, checked."""
    fh.seek(0)
    first = fh.readline(MAX_RECORD_BYTES + 1)  # decoded already; read again only to find where it ends
    if not first.endswith(b"\n") and len(first) > MAX_RECORD_BYTES:
        raise RunFileError(f"run file {path}: line 1 is longer than {MAX_RECORD_BYTES >> 20} MiB")
    body = _LinesBody(fh, str(path), fh.tell())
    final = body.last_header()
    if final is not None:
        header = {**header, "run": final}
    check_header({**header, "records": []}, str(path))
    return OpenRunFile(path, header, body, fh)


def read_run(path: Path | str) -> dict[str, Any]:
    """A whole run file, either schema, as ``{"schema_version", "run", "records": [...]}``, every record checked
    (:class:`RunFileError` at the first bad one). The one reader behind
    :func:`fp8bench.results.runfile.read_run_file` and :func:`fp8bench.results.ingest.read_results_file`."""
    streamed = stream_run_file(path)
    if streamed is None:
        return validate_run(load_json(path, "run file"), str(path))
    return {**streamed.header, "records": list(streamed.records())}


def read_run_header(path: Path | str) -> dict[str, Any]:
    """A run file's header (``{"schema_version", "run"}``, the final one), its records not read."""
    streamed = stream_run_file(path)
    if streamed is None:
        data = load_json(path, "run file")
        check_header(data, str(path))
        return {"schema_version": data["schema_version"], "run": data["run"]}
    streamed.close()
    return streamed.header
