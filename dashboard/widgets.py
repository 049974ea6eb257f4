"""Small building blocks every page shares: the current view, tables with a CSV download, empty-state notes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from fp8bench.core.escaping import neutralize_formulas
from fp8bench.dashboard.data import FILL_COMMAND, Snapshot
from fp8bench.dashboard.filters import Filters
from fp8bench.dashboard.safe_text import safe_figure, shown
from fp8bench.results.store.queries import RecordFilter

_VIEW_KEY = "fp8bench_view"
# The records' noise (fp8bench.core.noise): relative spread of the samples, shown in percent.
NOISE_COLUMN = st.column_config.NumberColumn("noise (IQR/median)", format="percent",
                                             help="relative spread of the samples; noisy: over 10%, or the run "
                                                  "started with the host's load above its CPU count")
MAX_POINTS = 600  # per series on a chart: more than a screen's width of markers says nothing more
# Characters per line of a chart's category label: a transformer's whole config (~100 characters) on one line would
# take half the chart's width from the plot.
LABEL_WIDTH = 36


@dataclass(frozen=True)
class View:
    """The store snapshot, the sidebar's filters and the records they select; built once per rerun."""

    snapshot: Snapshot
    filters: Filters
    query: RecordFilter  # the filters as a store query, for pages that read more than the latest records
    records: pd.DataFrame  # the latest record of each case per device (overall and per subset it reads), filtered


def set_view(view: View) -> None:
    st.session_state[_VIEW_KEY] = view


def clear_view() -> None:
    st.session_state.pop(_VIEW_KEY, None)


def current_view() -> View:
    """The view the entry script built; if it stopped first (empty or unreadable store, message shown), stop."""
    view = st.session_state.get(_VIEW_KEY)
    if view is None:
        st.stop()
    return view


def chart(fig: go.Figure, key: str) -> None:
    """Draw a plotly figure, its stored strings shown as text, never as plotly's HTML (links)."""
    st.plotly_chart(safe_figure(fig), key=key)


# A stored time with its fractional seconds: the page shows it to the second.
_FRACTION = re.compile(r"^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:\.\d+)?(?:[+-]\d{2}:?\d{2}|Z)?$")


def for_display(frame: pd.DataFrame, column_config: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """What a table shows of ``frame``: a time in seconds (a float column named ``*_s``) in milliseconds, every
    number column a page gave no format of its own with three significant digits; a number column with an empty cell
    as text, each number formatted and the empty cell ``-`` (Streamlit draws a missing number as ``None``, whatever
    the format); in text columns a stored time to the second (UTC) and an empty cell as ``-``. The CSV keeps the
    stored values; ``column_config`` (the page's own formats and labels) wins."""
    config = dict(column_config)
    displayed = frame.copy()
    for name in frame.columns:
        column = frame[name]
        own = config.get(name)
        if _number_config(own) and not pd.api.types.is_numeric_dtype(column):
            column = pd.to_numeric(column, errors="coerce").astype(float)  # numbers and None in an object column
        if pd.api.types.is_float_dtype(column):
            if own is not None and not isinstance(own, dict):
                continue  # a page's own column object: left as the page made it
            label, fmt = _number_display(name, own)
            values = column * 1e3 if own is None and name.endswith("_s") else column
            if values.isna().any():
                displayed[name] = values.map(lambda v, f=fmt: "-" if pd.isna(v) else _formatted(v, f))
                config[name] = st.column_config.TextColumn(label, help=(own or {}).get("help"), alignment="right")
            else:
                displayed[name] = values
                config[name] = own or st.column_config.NumberColumn(label, format=fmt)
        elif _text(column) and (own is None or _text_config(own)):
            displayed[name] = column.str.replace(_FRACTION, r"\1 \2", regex=True).fillna("-")
    return displayed, config


def _text_config(own: Any) -> bool:
    """``own`` is a page's plain text column (a ``TextColumn``: not a link, whose empty cell must stay empty)."""
    return isinstance(own, dict) and (own.get("type_config") or {}).get("type") == "text"


def _number_config(own: Any) -> bool:
    """``own`` is a page's number column format (a ``NumberColumn``)."""
    return isinstance(own, dict) and (own.get("type_config") or {}).get("type") == "number"


def _number_display(name: str, own: dict[str, Any] | None) -> tuple[str | None, str]:
    """A number column's label and printf format: the page's own, else ``NAME (ms)`` for seconds and ``%.3g``."""
    if own is not None:
        return own.get("label"), (own.get("type_config") or {}).get("format") or "%.3g"
    return (f"{name[:-2]} (ms)" if name.endswith("_s") else None), "%.3g"


def _formatted(value: float, fmt: str) -> str:
    """``value`` in a column format as Streamlit reads it: printf (``%.2fx``) or ``percent``; others as ``%.3g``."""
    if fmt == "percent":
        return f"{value:.1%}"
    return fmt % value if "%" in fmt else f"{value:.3g}"


def _text(column: pd.Series) -> bool:
    """A column of text and empty cells only (pandas 3 stores text as ``str``, older ones as ``object``)."""
    if not (pd.api.types.is_string_dtype(column) or column.dtype == object):
        return False
    return pd.api.types.infer_dtype(column, skipna=True) in ("string", "empty")


def with_short_paths(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose text columns show server paths shortened and passwords masked
    (:func:`fp8bench.dashboard.safe_text.shown`), as every table shows them."""
    frame = frame.copy()
    for i, dtype in enumerate(frame.dtypes):
        if pd.api.types.is_object_dtype(dtype) or isinstance(dtype, pd.StringDtype):
            # Replaced whole (isetitem), not written into: a text column's own dtype may refuse what map gives.
            frame.isetitem(i, frame.iloc[:, i].map(shown, na_action="ignore"))
    return frame


def table(frame: pd.DataFrame, name: str, **column_config: Any) -> None:
    """Show ``frame`` (:func:`for_display`: formatting only; server paths shortened by
    :func:`fp8bench.dashboard.safe_text.shown`) with a CSV download of the stored rows, paths shortened alike."""
    frame = with_short_paths(frame)
    displayed, config = for_display(frame, column_config)
    st.dataframe(displayed, hide_index=True, column_config=config or None, width="stretch")
    # A callable: the CSV is written only when someone asks for it, not on every rerun. Stored text that a
    # spreadsheet would run as a formula is prefixed with ' (fp8bench.core.escaping).
    st.download_button(f"Download {name} as CSV", lambda: neutralize_formulas(frame).to_csv(index=False).encode(),
                       file_name=f"{name}.csv", mime="text/csv", key=f"csv_{name}", on_click="ignore")


def nothing_selected(what: str = "records") -> None:
    st.info(f"No {what} match the filters. Widen them in the sidebar, or add data with `{FILL_COMMAND}`.")


def ratio_text(value: float) -> str:
    """A speedup for people: three significant digits (``0.00162x``, ``1.71x``, ``213x``), so a case 500x slower
    never reads as ``0.00x``."""
    return f"{value:,.0f}x" if abs(value) >= 1000 else f"{value:.3g}x"


def wrap_label(text: str, width: int = LABEL_WIDTH) -> str:
    """``text`` broken into lines of about ``width`` characters at its commas (plotly's ``<br>``). Every character
    is kept, so two shapes that differ only at their end stay two categories."""
    lines: list[str] = []
    for part in str(text).split(","):
        if lines and len(lines[-1]) + 1 + len(part) <= width:
            lines[-1] += "," + part
        else:
            lines.append(part)
    return ",<br>".join(lines)


def downsample(points: pd.DataFrame, x: str, y: str, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """At most about ``max_points`` rows: the rows are cut into ``max_points // 2`` stretches along ``x`` and each
    keeps its lowest and highest ``y`` (min-max decimation: steps and spikes survive, flat noise is thinned)."""
    if len(points) <= max_points:
        return points
    ordered = points.sort_values(x, kind="stable").reset_index(drop=True)
    bucket = np.arange(len(ordered)) * (max_points // 2) // len(ordered)
    values = ordered[y].to_numpy(dtype=float)
    keep = set()
    for b in np.unique(bucket):
        idx = np.flatnonzero(bucket == b)
        finite = idx[np.isfinite(values[idx])]
        if finite.size:
            keep.update((int(finite[np.argmin(values[finite])]), int(finite[np.argmax(values[finite])])))
    return ordered.loc[sorted(keep)]
