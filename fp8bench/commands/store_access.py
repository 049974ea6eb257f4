"""How a verb's action reaches the store: opened read-only on first use, and the filter names it accepts
(carried by the stored records, or registered). Loads the store, so only actions import it; the registries (and
torch, which their modules import) load only to judge a name that no stored record carries.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any

from fp8bench.commands.verb_interface import store_target
from fp8bench.core.plugins import registered_names
from fp8bench.core.registry import UnknownNameError
from fp8bench.results.store import Store, open_store
from fp8bench.results.store.queries import filter_options


def lazy_read_only_store(args: argparse.Namespace) -> Callable[[], Any]:
    """A function that opens the verb's store for reading the first time it is called (``gate`` and ``compare``
    need a store only when a side names run ids, not for two files)."""
    return cache(lambda: open_store(store_target(args), read_only=True))


def check_filter_names(filters: Mapping[str, Iterable[str]],
                       stored: Mapping[str, Iterable[object]] | None = None) -> None:
    """Refuse a ``workload``, ``backend`` or ``precision`` filter value that is neither registered nor in the data.

    A filter that matches nothing would otherwise read as an empty store or "no change found": a typo must be bad
    input naming the value. Names found only in ``stored`` (written by an older version or a plugin not loaded now)
    stay accepted, since their records can still be read. The registries are asked only about a name the records
    do not carry: reading a store by the names in it loads no registering module."""
    carried = {kind: {str(n) for n in (stored or {}).get(kind, ()) if n} for kind in filters}
    if all(name in carried[kind] for kind, names in filters.items() for name in names):
        return
    registered = registered_names()
    for kind, names in filters.items():
        accepted = list(registered[kind])
        accepted += sorted(carried[kind] - set(accepted))
        for name in names:
            if name not in accepted:
                raise UnknownNameError(kind, name, accepted)


def stored_names(store: Store) -> dict[str, list[str]]:
    """The workload, backend and precision names that ``store``'s records carry."""
    options = filter_options(store)
    return {kind: list(options[kind].dropna().unique()) for kind in ("workload", "backend", "precision")}
