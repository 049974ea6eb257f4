"""Reading a run file one record at a time, in memory bounded by the largest record, not by the file.

A run of a large suite writes a run file of hundreds of megabytes (raw samples of every case). Parsing it whole
holds the text and every record's objects at once (a 200 MB file peaked above 1 GB while being ingested), so
:func:`stream_run_file` reads the header first, then hands out the records one by one from a window of the file.

The file is read in chunks of :data:`CHUNK_BYTES`; each value is decoded by the standard library's
``json.JSONDecoder.raw_decode``, so what is accepted and refused (``NaN`` as careless tools write it, a nesting
too deep for the parser) is exactly what reading the whole file would accept and refuse. A record that does not
fit the window yet makes it grow, up to :data:`MAX_RECORD_BYTES`: a longer one is refused, which bounds memory
whatever the file holds. The incremental layout needs the keys in the order fp8bench writes them
(``schema_version``, ``run``, then ``records``); a file in another order, or one that is not a run file at all
(pytest-benchmark JSON), is read whole by :func:`fp8bench.results.runfile.load_json` instead.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from fp8bench.results.record_check import MAX_DEPTH
from fp8bench.results.runfile import RunFileError, check_header, check_record, open_regular

CHUNK_BYTES = 1 << 20  # read size; a record is decoded once it is whole in the window
MAX_RECORD_BYTES = 64 << 20  # one record's text at most (a record with 100,000 raw samples is about 2.5 MB)

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _Incomplete(Exception):
    """The window ends before the value does: read more."""


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
class StreamedRun:
    """A run file's header, and its records on demand (each checked as it is read)."""

    path: Path
    header: dict[str, Any]  # {"schema_version", "run"}; "records" is read by records()
    _window: _Window
    _fh: BinaryIO

    def records(self) -> Iterator[dict[str, Any]]:
        """Each record, in file order, checked (:func:`fp8bench.results.runfile.check_record`); closes the file at the end.
        :class:`RunFileError` at the first bad record or byte, naming the file and the record's index."""
        window, origin = self._window, str(self.path)
        try:
            if window.char() == "]":
                window.pos += 1
                return
            index = 0
            while True:
                record = window.value(f"record {index}")
                check_record(record, index, origin)
                yield record
                index += 1
                if window.expect(",]") == "]":
                    break
            self._rest()
        finally:
            self._fh.close()

    def _rest(self) -> None:
        """The keys after ``records`` (read and dropped) and the closing brace, so that a file cut short after its
        records is refused as reading it whole would refuse it."""
        window = self._window
        while window.expect(",}") == ",":
            window.value("a key")
            window.expect(":")
            window.value("a value after the records")
        if window.char():
            window.fail("extra data after the run file's object")

    def close(self) -> None:
        self._fh.close()


def stream_run_file(path: Path | str) -> StreamedRun | None:
    """Open a run file for reading record by record, its header checked; ``None`` when the file does not start the
    way fp8bench writes run files (then read it whole). :class:`RunFileError` for a file that cannot be read."""
    path = Path(path)
    fh = open_regular(path, "run file")
    try:
        window = _Window(fh, str(path))
        if window.char() != "{":
            fh.close()
            return None
        window.pos += 1
        header: dict[str, Any] = {}
        while True:
            if window.char() != '"':
                fh.close()
                return None
            key = window.value("a key")
            window.expect(":")
            if key == "records":
                if set(header) != {"schema_version", "run"} or window.char() != "[":
                    fh.close()
                    return None
                window.pos += 1
                check_header({**header, "records": []}, str(path))
                return StreamedRun(path, header, window, fh)
            if key not in ("schema_version", "run"):
                fh.close()
                return None
            header[key] = window.value(f"{key!r}")
            window.expect(",")
    except BaseException:
        fh.close()
        raise
