"""Shape strings: ``MxNxK`` for a GEMM, or ``key=value,...`` for any workload (``b=2,h=8,s=1024,d=64``)."""

from __future__ import annotations

import math
import re


class ShapeError(ValueError):
    """A shape string that cannot be parsed or describes an impossible shape."""


# Shape values are integers, except where a workload takes a named choice or a real number (``grouped_gemm``'s
# ``route=zipf``, ``impl=loop``, ``alpha=1.2``); records, labels and the store carry them as they are.
Shape = dict[str, int]


def parse_keyvalue(text: str, keys: tuple[str, ...], optional: dict[str, int] | None = None) -> Shape:
    """Parse ``k=v,...`` into a dict with exactly ``keys`` (plus ``optional`` ones, defaulted)."""
    optional = optional or {}
    shape: Shape = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise ShapeError(f"shape {text!r}: {part!r} is not key=value; expected keys {', '.join(keys)}")
        key, _, value = (s.strip() for s in part.partition("="))
        if key not in keys and key not in optional:
            raise ShapeError(f"shape {text!r}: unknown key {key!r}; accepted: {', '.join([*keys, *optional])}")
        shape[key] = parse_positive(value, f"shape {text!r}: {key}")
    missing = [k for k in keys if k not in shape]
    if missing:
        raise ShapeError(f"shape {text!r}: missing {', '.join(missing)}; expected keys {', '.join(keys)}")
    return {**optional, **shape}


def parse_positive(value: str, what: str) -> int:
    if not re.fullmatch(r"[+-]?\d+", value.strip()):
        raise ShapeError(f"{what} = {value!r} is not an integer")
    n = int(value)
    if n <= 0:
        raise ShapeError(f"{what} = {n} must be a positive integer")
    return n


def label(shape: Shape) -> str:
    """Canonical text of a shape: ``m=4096,n=4096,k=4096`` (stable, used in keys and tables)."""
    return ",".join(f"{k}={v}" for k, v in shape.items())


# A value of stored shape text: an integer, a real number (``alpha=1.2``) or a named choice (``route=zipf``).
StoredValue = int | float | str
_INTEGER = re.compile(r"[+-]?\d+")


def parse_stored(text: str) -> dict[str, StoredValue]:
    """Stored shape text (:func:`label`'s ``k=v,...``, as run files are written to the store) back as a record's
    shape dict: integer values as ``int``, other finite numbers as ``float``, anything else as the text it is.

    Unlike a workload's own parser this one never refuses: it reads what any fp8bench wrote, whatever the
    workload, so that a page or a summary can show every record (a part without ``=`` is ignored)."""
    shape: dict[str, StoredValue] = {}
    for part in text.split(","):
        key, sep, raw = part.partition("=")
        if not sep:
            continue
        raw = raw.strip()
        if _INTEGER.fullmatch(raw):
            shape[key.strip()] = int(raw)
            continue
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        shape[key.strip()] = number if math.isfinite(number) else raw
    return shape


def shape_label(shape: str) -> str:
    """The store's shape text for people: ``m=128,n=256,k=64`` as ``128x256x64``; any other shape unchanged."""
    parts = parse_stored(shape) if isinstance(shape, str) else {}
    if set(parts) == {"m", "n", "k"}:
        return f"{parts['m']}x{parts['n']}x{parts['k']}"
    return str(shape)
