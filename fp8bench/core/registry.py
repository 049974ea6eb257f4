"""One generic, explicit registry for workloads, precisions and backends.

Names are the public contract (they appear on the command line, in run files and in the store), so they are given
explicitly when an item is registered and never derived from module paths. Looking up a name that is not there
raises :class:`UnknownNameError`, whose message lists every accepted name: that is the error a user sees for a typo
such as ``--precision fp8_tensorWise``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(ValueError):
    """A name that no registry entry carries; the message names the bad value and the accepted ones."""

    def __init__(self, kind: str, name: str, accepted: list[str]) -> None:
        self.kind, self.name, self.accepted = kind, name, accepted
        super().__init__(f"unknown {kind} {name!r}; accepted: {', '.join(accepted) or '(none registered)'}")


class Registry(Generic[T]):
    """An ordered name -> item mapping that refuses duplicates and explains misses."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def add(self, name: str, item: T) -> T:
        if not name or name != name.strip():
            raise ValueError(f"{self.kind} name must be a non-empty string without surrounding blanks: {name!r}")
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = item
        return item

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""

        def decorate(item: T) -> T:
            return self.add(name, item)

        return decorate

    def remove(self, name: str) -> T:
        """Unregister ``name`` (for plugins that are loaded for a while, such as test backends)."""
        try:
            return self._items.pop(name)
        except KeyError:
            raise UnknownNameError(self.kind, name, self.names()) from None

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def items(self) -> list[tuple[str, T]]:
        return list(self._items.items())

    def __len__(self) -> int:
        return len(self._items)
