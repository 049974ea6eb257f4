"""Typed parts of stored JSON: one frozen dataclass per JSON object that fp8bench writes and reads back (a record's
numerics, energy window and timing in :mod:`fp8bench.core.record_parts`; a run header and its git, host, device and
software objects in :mod:`fp8bench.core.run_header`).

Files and stores written by older fp8bench lack the keys added since, so a part reads every key it names as
``None`` when the object lacks it: that rule is stated here once, for every part and every key, instead of beside
each reader.

A part writes back exactly what it read (:meth:`Part.to_json`): its keys in the order they were stored, a key stored
as null written as null, a key the stored object lacked left out again, and the keys it does not name (written by
a plugin, or by a newer fp8bench of the same schema) carried through unchanged. So reading a stored object and
writing it again gives the same bytes, whichever fp8bench wrote it. A part built in code (``Numerics(sqnr_db=30.0)``)
writes the keys it holds a value for, in the order the class names them; one changed with ``dataclasses.replace``
keeps its stored keys and adds the keys newly set. A part may hold parts (a run header holds its ``git`` object):
each is written as its own object, and one the stored object lacked and nothing was set on stays left out.

The values are JSON values as stored (an integer stays an integer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar, cast

P = TypeVar("P", bound="Part")

# Fields of every part that hold how it was stored, not what it says.
_STORAGE = ("stored_keys", "other", "stored_null")


@dataclass(frozen=True)
class Part:
    """One stored JSON object, as typed fields; see the module docstring for how it reads and writes.

    ``stored_keys`` is the stored object's key order (``None`` for a part built in code), ``other`` the stored keys
    the part does not name, ``stored_null`` whether null was stored where the object belongs (a record field
    repaired by :func:`fp8bench.results.record_check.repaired`, a header written without it)."""

    stored_keys: tuple[str, ...] | None = field(default=None, compare=False, repr=False, kw_only=True)
    other: Mapping[str, object] = field(default_factory=dict, repr=False, kw_only=True)
    stored_null: bool = field(default=False, compare=False, repr=False, kw_only=True)

    what: ClassVar[str] = "part"  # the key that holds it, for messages
    owner: ClassVar[str] = "record"  # what holds that key, for messages
    nested: ClassVar[tuple[str, ...]] = ()  # the fields that hold parts (a run header's ``git``)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The keys this part names, in the order it writes them."""
        return _names(cls)

    @classmethod
    def from_json(cls: type[P], data: Mapping[str, object] | None) -> P:
        """The part a stored object gives (``None``: null was stored there); a value that is not an object is
        refused, naming the key."""
        if data is None:
            return cls(stored_null=True)
        if not isinstance(data, Mapping):
            raise ValueError(f"{cls.owner} field {cls.what!r} is {type(data).__name__} {str(data)[:40]!r}; accepted: "
                             f"an object (keys {', '.join(cls.names())}), or null")
        names = _name_set(cls)
        if data.keys() <= names:  # every key named: the common case, read without sorting keys out
            return cls(**cast("Mapping[str, Any]", data), stored_keys=tuple(data))
        known: dict[str, Any] = {k: v for k, v in data.items() if k in names}
        return cls(**known, stored_keys=tuple(data), other={k: v for k, v in data.items() if k not in names})

    def to_json(self) -> dict[str, object] | None:
        """The object as it is stored: what :meth:`from_json` read, with any value set since (``None`` for a stored
        null that nothing was set on)."""
        values = {name: getattr(self, name) for name in self.names()}
        # A part held is written as its object; one the stored object lacked stays left out while it is empty.
        values.update((name, getattr(self, name).to_json()) for name in self.nested)
        empty = {name for name in self.nested if not values[name]}
        out = {key: values[key] if key in values else self.other[key] for key in self.stored_keys or ()}
        out.update((k, v) for k, v in values.items() if k not in out and v is not None and k not in empty)
        out.update((k, v) for k, v in self.other.items() if k not in out)
        return None if self.stored_null and not out else out

    def __bool__(self) -> bool:
        """Whether the part holds anything, as the stored object is empty or not."""
        return bool(self.to_json())


# Each part class's named keys, found once per class: every stored record's parts are read through them (a store
# ingests millions).
_NAMES: dict[type, tuple[tuple[str, ...], frozenset[str]]] = {}


def _names(cls: type) -> tuple[str, ...]:
    return _known(cls)[0]


def _name_set(cls: type) -> frozenset[str]:
    return _known(cls)[1]


def _known(cls: type) -> tuple[tuple[str, ...], frozenset[str]]:
    if cls not in _NAMES:
        names = tuple(f.name for f in fields(cls) if f.name not in _STORAGE)
        _NAMES[cls] = names, frozenset(names)
    return _NAMES[cls]
