"""Chart axes a reader cannot misread: log axes labelled in full at 1-2-5 steps, times in milliseconds.

Plotly labels the ticks between a log axis's decades with their leading digit alone, in small type ("2", "5"), and
on a range of a decade or two it labels every one of them: a speedup of 0.2x then reads as "2", and 0.5x as "5".
Here a log axis gets its ticks set explicitly: the 1-2-5 steps inside the data's range, each written out with its
unit (``0.2x``, ``5x``), or only the decades when that would be more than :data:`MAX_TICKS` labels.

Records keep times in seconds; on a page a GEMM's time reads best in milliseconds, three significant digits, as the
CLI's tables print it (docs/cli.md, "Conventions").
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go

STEPS = (1, 2, 5)  # the mantissas of a log axis's ticks within each decade
MAX_TICKS = 12  # more labels than this crowd an axis: only the decades are labelled then


def tick_text(value: float) -> str:
    """A tick value written out: ``0.2``, ``50``, ``2000``; ``1e-05`` style beyond 1e-4 .. 1e6."""
    if 1e-4 <= value < 1e6:
        return f"{value:.6g}"
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def log_ticks(values: Iterable[float], suffix: str = "") -> tuple[list[float], list[str]]:
    """Tick values and labels for a log axis over ``values`` (the positive finite ones): every 1-2-5 step from the
    one at or below the smallest value to the one at or above the largest, or only the decades (every k-th when
    there are still too many) past :data:`MAX_TICKS`. Each label is the value written out, then ``suffix``."""
    finite = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if not finite:
        return [], []
    lo, hi = min(finite), max(finite)
    steps = [m * 10.0**e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
             for m in STEPS]
    below = max(s for s in steps if s <= lo * (1 + 1e-9))
    above = min(s for s in steps if s >= hi * (1 - 1e-9))
    ticks = [s for s in steps if below <= s <= above]
    if len(ticks) > MAX_TICKS:
        decades = [s for s in ticks if round(s / 10.0 ** math.floor(math.log10(s) + 1e-9)) == 1]
        stride = math.ceil(len(decades) / MAX_TICKS)
        ticks = decades[::stride]
    return ticks, [tick_text(t) + suffix for t in ticks]


def log_axis(fig: go.Figure, axis: str, values: Iterable[float], suffix: str = "", **where: Any) -> None:
    """Make ``fig``'s ``axis`` (``"x"`` or ``"y"``; ``row``/``col`` in ``where``) a log axis labelled by
    :func:`log_ticks` over ``values``."""
    ticks, text = log_ticks(values, suffix)
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(type="log", tickmode="array", tickvals=ticks, ticktext=text, **where)


def in_ms(seconds: Any) -> Any:
    """A time (or a column of them) in seconds as milliseconds."""
    return seconds * 1e3
