"""Checking the shape of stored data: each field of a record or run header has the JSON type the code reading it
expects, whatever wrote it.

A run file is JSON that anything may have written or edited: an older fp8bench, a plugin, a script, a hostile
contributor. The store copies the fields it reads into typed SQL columns, and the gate, the exports and the
dashboard call ``.items()`` on ``phases`` and ``.get()`` on ``numerics``; a list where an object belongs, a number
written as text, or a shape of ``"64k"`` would crash them far from the file that carried it. So every record and
run header is checked where it enters (reading a run file, ingest) and where old data is carried forward (the store
migration that repairs records stored before this check existed).

The expected types come from one place each: a record's top-level fields from the annotations of
:class:`fp8bench.core.records.Record` (``float | None`` is a number or null, ``dict[...]`` or a typed part an object,
``list[...]`` a list); the keys of each typed part from its annotations (:mod:`fp8bench.core.record_parts`); what the
store and the pages read of ``extra`` and of the run header from :data:`NESTED_RECORD_FIELDS` and
:data:`RUN_FIELDS`. A field may always be absent or null. JSON integers have no size limit while SQL integer
columns do: that bound is the store's to enforce (:mod:`fp8bench.results.store`), since only it knows the column.

Containers nested deeper than :data:`MAX_DEPTH` are refused too: Python's own JSON parser gives up near 1,000
levels with a ``RecursionError``, and nothing fp8bench writes comes near the bound.
"""

from __future__ import annotations

import math
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fp8bench.core.parts import Part
from fp8bench.core.records import PARTS, STORED_KEYS, key_owner

# Deepest nesting of objects and lists accepted inside one record or header (a record fp8bench writes is under 8).
MAX_DEPTH = 64

# Shape values are integers (``m=4096``), or where a workload takes a named choice or a real number
# (fp8bench.core.shapes: ``op=all_gather``, ``route=zipf``, ``alpha=1.2``) a name or a number. A name starts with a
# letter and holds no ``,``, ``=`` or space, which would break the store's ``k=v,...`` shape text; a count written as
# text (``64k``) is neither. The test id of a benchmark imported from pytest-benchmark JSON (``shape.test``,
# fp8bench.results.ingest) may be any text.
SHAPE_TEXT_KEYS = ("test",)
_SHAPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.+-]*")


@dataclass(frozen=True)
class Kind:
    """A JSON type as the reading code expects it."""

    name: str  # for messages: "text", "a number", ...
    accepts: typing.Callable[[Any], bool]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# Every store column holding an integer is 64 bits wide (PostgreSQL BIGINT; Python's sqlite3 cannot pass more).
_INT64 = (-2**63, 2**63 - 1)


def _is_integer(value: Any) -> bool:
    # JavaScript and other writers emit large integers as 1e+21: an integral float is an integer.
    integral = (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, float) and math.isfinite(value) and value.is_integer())
    return integral and _INT64[0] <= int(value) <= _INT64[1]


TEXT = Kind("text", lambda v: isinstance(v, str))
NUMBER = Kind("a number", _is_number)
INTEGER = Kind("an integer of at most 64 bits", _is_integer)
BOOLEAN = Kind("true or false", lambda v: isinstance(v, bool))
OBJECT = Kind("an object", lambda v: isinstance(v, dict))
LIST = Kind("a list", lambda v: isinstance(v, list))

_SCALARS = {str: TEXT, float: NUMBER, int: INTEGER, bool: BOOLEAN}


def _kind_of(annotation: Any) -> Kind | None:
    """The JSON kind of a dataclass annotation (``float | None`` -> NUMBER, a record part -> OBJECT); ``None`` for
    ``Any``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return _kind_of(args[0]) if len(args) == 1 else None
    origin = typing.get_origin(annotation) or annotation
    if origin is dict or (isinstance(origin, type) and issubclass(origin, Part)):
        return OBJECT
    if origin is list:
        return LIST
    return _SCALARS.get(origin)


RECORD_FIELDS: dict[str, Kind] = {
    key: kind for key in STORED_KEYS if (kind := _kind_of(typing.get_type_hints(key_owner(key))[key])) is not None}
"""Every top-level key of a stored record and its kind, from :class:`fp8bench.core.records.Record` and its groups."""

def _part_kinds() -> dict[tuple[str, ...], Kind]:
    """Every key a record part names (fp8bench.core.record_parts) and the kind its annotation gives."""
    out: dict[tuple[str, ...], Kind] = {}
    for name, part in PARTS.items():
        hints = typing.get_type_hints(part)
        out.update({(name, key): kind for key in part.names() if (kind := _kind_of(hints[key])) is not None})
    return out


NESTED_RECORD_FIELDS: dict[tuple[str, ...], Kind] = {
    # The typed parts' keys, then what the store's typed columns and the pages read of ``extra``
    # (fp8bench.results.store.columns).
    **_part_kinds(),
    ("extra", "convergence"): OBJECT, ("extra", "convergence", "verdict"): TEXT,
    ("extra", "convergence", "final_gap"): NUMBER, ("extra", "convergence", "max_gap"): NUMBER,
    ("extra", "convergence", "max_gap_step"): INTEGER, ("extra", "convergence", "window"): INTEGER,
    ("extra", "losses"): LIST, ("extra", "profile"): OBJECT, ("extra", "profile", "trace"): TEXT,
}

RUN_FIELDS: dict[tuple[str, ...], Kind] = {
    # The run header's fields that the store copies into columns or the pages and the gate read.
    ("started_at",): TEXT, ("finished_at",): TEXT, ("status",): TEXT, ("device_spec",): TEXT,
    ("n_records",): INTEGER, ("n_cases",): INTEGER,
    ("git",): OBJECT, ("git", "commit"): TEXT, ("git", "branch"): TEXT, ("git", "dirty"): BOOLEAN,
    ("git", "first_parent_depth"): INTEGER, ("git", "commit_time"): TEXT, ("git", "remote"): TEXT,
    ("host",): OBJECT, ("host", "alias"): TEXT, ("host", "os"): TEXT,
    ("device",): OBJECT, ("device", "name"): TEXT, ("software",): OBJECT, ("settings",): OBJECT, ("gpu",): OBJECT,
    ("spec",): OBJECT, ("notes",): LIST,
}


@dataclass(frozen=True)
class Problem:
    """One field whose value is not what its readers expect."""

    path: tuple[str, ...]
    value: Any
    expected: str

    @property
    def field(self) -> str:
        return ".".join(self.path)

    def __str__(self) -> str:
        return f"field {self.field!r} is {describe(self.value)}; expected {self.expected}"


def describe(value: Any, limit: int = 40) -> str:
    """A value for a message: its JSON type and a short excerpt (containers by size only: they may be huge or
    nested too deep to print)."""
    if isinstance(value, dict):
        return f"an object of {len(value)} field(s)"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()
    if isinstance(value, str):
        text = value if len(value) <= limit else value[:limit] + "..."
        return f"text {text!r}"
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return f"{type(value).__name__} {value!r}"


def _depth_exceeded(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether containers nest deeper than ``limit`` inside ``value`` (iterative: any depth is safe to check)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _lookup(data: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    """``(present, value)`` of ``path`` in ``data``; absent when a parent is missing or not an object."""
    node: Any = data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


def _typed(data: dict[str, Any], table: dict[tuple[str, ...], Kind]) -> Iterator[Problem]:
    for path, kind in table.items():
        present, value = _lookup(data, path)
        if present and value is not None and not kind.accepts(value):
            yield Problem(path, value, kind.name)


def _too_deep(data: dict[str, Any]) -> Iterator[Problem]:
    for name, value in data.items():
        if isinstance(value, dict | list) and _depth_exceeded(value, MAX_DEPTH - 1):
            yield Problem((str(name),), value, f"at most {MAX_DEPTH} levels of nested objects and lists")


def record_problems(record: dict[str, Any]) -> list[Problem]:
    """Every field of ``record`` whose value its readers cannot take (required fields are checked by the run-file
    reader, :func:`fp8bench.results.runfile.validate_records`, which names what is missing)."""
    problems = list(_too_deep(record))
    deep = {p.path for p in problems}
    top: dict[tuple[str, ...], Kind] = {(name,): kind for name, kind in RECORD_FIELDS.items()}
    problems += [p for p in _typed(record, top) if p.path not in deep]
    problems += [p for p in _typed(record, NESTED_RECORD_FIELDS) if p.path[:1] not in deep]
    shape = record.get("shape")
    if isinstance(shape, dict):
        for key, value in shape.items():
            if key in SHAPE_TEXT_KEYS and isinstance(value, str):
                continue
            if not (_is_number(value) or (isinstance(value, str) and _SHAPE_NAME.fullmatch(value))):
                problems.append(Problem(("shape", str(key)), value,
                                        "an integer (m=4096), or a named choice such as op=all_gather"))
    phases = record.get("phases")
    if isinstance(phases, dict):
        problems += [Problem(("phases", str(k)), v, "a number of seconds or null")
                     for k, v in phases.items() if v is not None and not _is_number(v)]
    return problems


def run_problems(run: dict[str, Any]) -> list[Problem]:
    """Every field of a run header whose value its readers cannot take."""
    problems = list(_too_deep(run))
    deep = {p.path for p in problems}
    return problems + [p for p in _typed(run, RUN_FIELDS) if p.path[:1] not in deep]


def repaired(data: dict[str, Any], problems: list[Problem], when: str,
             required: typing.Collection[str] = ()) -> dict[str, Any]:
    """A copy of ``data`` with each problem's field set to null and a note saying so (in ``notes``); ``when``
    says what repaired it ("the store was migrated"). A problem of a ``required`` field is left alone: null would
    not be a value either."""
    out = dict(data)
    notes = list(out.get("notes") or []) if isinstance(out.get("notes"), list) else []
    for problem in problems:
        if len(problem.path) == 1 and problem.path[0] in required:
            continue
        if len(problem.path) == 1 and problem.path[0] == "notes":
            notes = []
        node = out
        for key in problem.path[:-1]:  # copy each level on the way down: ``data`` stays as it was
            node[key] = dict(node[key])
            node = node[key]
        node[problem.path[-1]] = None
        notes.append(f"{problem.field} was {describe(problem.value)}, not {problem.expected}; set to null when "
                     f"{when}")
    out["notes"] = notes
    return out
