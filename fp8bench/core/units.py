"""Units users already type: fractions written as ``0.05`` or ``5%``, and noise targets in percent.

fp8bench keeps every relative quantity as a fraction internally (0.05 is 5%), the way its records and reports store
them. On the command line and in suite files a user may write either form: ``--threshold 5%`` and ``--threshold
0.05`` mean the same. The one exception is the sampling noise target, which follows nvbench's ``--max-noise``: a
bare number there is a percentage (``--max-noise 0.5`` is 0.5 %, nvbench's default), as nvbench users type it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def parse_fraction(text: str | float, what: str = "value") -> float:
    """``"5%"`` or ``"0.05"`` (or a number) -> ``0.05``. Raises ``ValueError`` naming ``what`` and the forms."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    raw = str(text).strip()
    percent = raw.endswith("%")
    try:
        value = float(raw.removesuffix("%").strip())
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number; write a fraction (0.05) or a percentage (5%)") from None
    return value / 100 if percent else value


def parse_percent(text: str | float, what: str = "value") -> float:
    """``"0.5"`` or ``"0.5%"`` -> ``0.005``: a bare number is a percentage (nvbench's ``--max-noise`` unit)."""
    raw = str(text).strip()
    return parse_fraction(raw if raw.endswith("%") else f"{raw}%", what)


def _argparse_type(parse: Callable[[str, str], float], flag: str, name: str) -> Callable[[str], float]:
    """An argparse ``type=`` that parses with ``parse`` and turns its ``ValueError`` into argparse's error."""

    def convert(text: str) -> float:
        try:
            return parse(text, flag)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = name  # argparse names the type in its error message
    return convert


def fraction_arg(flag: str) -> Callable[[str], float]:
    """An argparse ``type=`` for a fraction flag: accepts ``0.05`` and ``5%``."""
    return _argparse_type(parse_fraction, flag, "fraction")


def percent_arg(flag: str) -> Callable[[str], float]:
    """An argparse ``type=`` for a percentage flag (a bare number is percent); returns a fraction."""
    return _argparse_type(parse_percent, flag, "percentage")


def parse_seconds(text: str | float, what: str = "value") -> float:
    """A finite positive number of seconds (``"90"``, ``"1.5"``). Raises ``ValueError`` naming ``what``."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{what} {text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} {text!r}: give a finite positive number of seconds")
    return value


def positive_seconds(flag: str) -> Callable[[str], float]:
    """An argparse ``type=`` for a duration flag: a finite positive number of seconds."""
    return _argparse_type(parse_seconds, flag, "seconds")
